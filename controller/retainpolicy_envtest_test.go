package controller_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

// TestReleaseUnderRetainPolicy: with deploy/'s retained-volume admission
// policy enforced and the manager acting as kdefer's ServiceAccount, as
// deployed, a succeeded run still releases its volume; a failed run, and a
// succeeded run that is Incomplete, keep it against a user's delete, and
// `kdefer release` (the annotation) then releases it: every release is
// kdefer's own delete, which the policy lets through.
func TestReleaseUnderRetainPolicy(t *testing.T) {
	t.Parallel() // see newHarness
	h := newHarness(t)
	h.env.InstallRetainPolicy(t)
	alice := h.env.Impersonate(t, "alice", "system:masters")
	admin := h.env.Config
	sa := rest.CopyConfig(admin)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kdefer-system:kdefer-controller", Groups: []string{"system:masters"}}
	h.env.Config = sa // the manager's config
	h.start()
	h.env.Config = admin
	ctx := context.Background()
	ns := h.namespace("retain")

	_, ok := h.managedJobPod(ns, "ok")
	run := h.waitArmed(ok)
	h.updatePodStatus(ok, func(p *corev1.Pod) { kt.Terminate(p, 0, "Completed", corev1.PodSucceeded, "") })
	h.finishDeferPod(h.waitDeferPod(run), 0, 0, okSummary)
	h.waitFinished(run, v1.DeferRunSucceeded)
	h.eventually("a succeeded run's volume released", func() (bool, error) { return h.pvcGone(ok) })

	// A failed run, and a succeeded run that could not save every file
	// (Incomplete), keep the volume against a user's delete until `kdefer
	// release`.
	sum := *okSummary
	sum.Unsaved = 1
	for _, tc := range []struct {
		name string
		code int32
		sum  *stagecontract.StageSummary
		want string
	}{
		{"bad", stagecontract.ExitPermanent, &stagecontract.StageSummary{Op: "out", ErrorClass: "permanent", Error: "bucket does not exist"}, v1.DeferRunFailed},
		{"partial", 0, &sum, v1.DeferRunIncomplete},
	} {
		_, pod := h.managedJobPod(ns, tc.name)
		run := h.waitArmed(pod)
		h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 1, "Error", corev1.PodFailed, "") })
		h.finishDeferPod(h.waitDeferPod(run), tc.code, 0, tc.sum)
		h.waitFinished(run, tc.want)
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name + "-" + v1.DefaultWorkVolumeName}}
		must(t, h.get(pvc))
		err := alice.Delete(ctx, pvc)
		if err == nil || !strings.Contains(err.Error(), "kept by DeferRun "+run.Name) || !strings.Contains(err.Error(), "kdefer release -n "+ns+" deferrun/"+run.Name) {
			t.Fatalf("%s: a user's delete of a retained volume: %v, want refused naming the run and kdefer release", tc.name, err)
		}
		h.eventually("kdefer release annotation written", func() (bool, error) {
			if err := h.get(run); err != nil {
				return false, err
			}
			orig := run.DeepCopy()
			if run.Annotations == nil {
				run.Annotations = map[string]string{}
			}
			run.Annotations[v1.AnnotationRelease] = "true"
			err := alice.Patch(ctx, run, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
			return err == nil, err
		})
		h.eventually(tc.name+": the retained volume released by kdefer release", func() (bool, error) { return h.pvcGone(pod) })
	}
}
