//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// TestClusterDeferPolicy: a platform team's ClusterDeferPolicy selects the
// scenario's namespace by a label; a plain Job there, with no kdefer label
// or annotation, is armed and stages out with the policy's destination and
// credentials (the namespace's Secret). While its defer pod runs, nothing that selects the Job's
// pods (its labels, its template's, its selector) sees the defer pod, and
// the Job's counts are its own pod's. A Job that opts out with
// kdefer.io/skip is left alone; once the policy is locked, the opt-out is
// refused.
func TestClusterDeferPolicy(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "platform")
	// Only this scenario's namespace carries the label the policy selects.
	raw := []byte(`{"metadata":{"labels":{"e2e-platform":"` + s.ns + `"}}}`)
	if err := s.env.Client.Patch(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, client.RawPatch(types.MergePatchType, raw)); err != nil {
		t.Fatal(err)
	}
	// The hold step keeps the defer pod running until the checks are done.
	pol := &v1.ClusterDeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}
	pol.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: map[string]string{"e2e-platform": s.ns}}
	pol.Spec.DeferPolicySpec = s.holdPolicy("hold").Spec
	pol.Spec.StageOut = &v1.StageOut{URL: s.stageOutURL()}
	// The platform's Secret is each namespace's (newScenario's "minio").
	pol.Spec.Credentials = &corev1.LocalObjectReference{Name: "minio"}
	s.create(pol)
	t.Cleanup(func() { _ = s.env.Client.Delete(context.Background(), pol) })

	// The controller labels the namespace.
	err := clusterenv.WaitFor(s.ctx, time.Minute, "namespace "+s.ns+" labelled "+v1.LabelPlatformPolicy, func(ctx context.Context) (bool, error) {
		ns := &corev1.Namespace{}
		if err := s.env.Client.Get(ctx, client.ObjectKey{Name: s.ns}, ns); err != nil {
			return false, err
		}
		return ns.Labels[v1.LabelPlatformPolicy] == pol.Name, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	w := small
	w.mode = "exit 0"
	plainJob := func(name string) *batchv1.Job {
		job := s.job(name, w)
		job.Labels, job.Annotations = map[string]string{"team": "physics"}, nil
		job.Spec.Template.Labels = map[string]string{"app": "e2e-" + name}
		return job
	}
	s.create(plainJob("plain"))
	pod := s.waitReady(2 * time.Minute)
	if ready := s.waitReady(2 * time.Minute); ready != "defer-"+pod {
		t.Fatalf("unexpected ready signal %q", ready)
	}
	run := s.waitRun(pod, 30*time.Second, "with a defer pod", inProgress)
	if run.Spec.PolicyName != pol.Name {
		t.Errorf("run armed with policy %q, want ClusterDeferPolicy %s", run.Spec.PolicyName, pol.Name)
	}
	if _, err := s.env.WaitPod(s.ctx, s.ns, run.Status.DeferPodName, time.Minute, "Running and Ready", podReady); err != nil {
		t.Fatal(err)
	}
	s.notTheJobs("plain", run.Status.DeferPodName)
	s.sig.release("defer-" + pod)
	run = s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	s.checkOutputs("plain", pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)

	// Opted out: admitted as written, never armed.
	skipped := plainJob("skipped")
	skipped.Annotations = map[string]string{v1.AnnotationSkip: "true"}
	// Unrendered, it has no work volume to write to.
	skipped.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", "echo left alone"}
	s.create(skipped)
	got := &batchv1.Job{}
	if err := s.env.Client.Get(s.ctx, client.ObjectKeyFromObject(skipped), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[v1.LabelEnabled] != "" || got.Spec.Template.Annotations[v1.AnnotationRendered] != "" {
		t.Errorf("Job skipped (kdefer.io/skip) was armed: labels %v, template annotations %v", got.Labels, got.Spec.Template.Annotations)
	}
	s.waitJob("skipped", 2*time.Minute, "complete", func(j *batchv1.Job) bool { return j.Status.Succeeded == 1 })
	for _, p := range s.podsOf("skipped") {
		if len(p.Finalizers) > 0 || p.Labels[v1.LabelManaged] != "" {
			t.Errorf("pod %s of the skipped Job: finalizers %v, label %s=%q; want none", p.Name, p.Finalizers, v1.LabelManaged, p.Labels[v1.LabelManaged])
		}
		if err := s.env.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: p.Name}, &v1.DeferRun{}); !apierrors.IsNotFound(err) {
			t.Errorf("DeferRun %s of the skipped Job: %v, want none", p.Name, err)
		}
	}

	// Locked in: the same opt-out is refused, naming the policy (the
	// webhook sees the change through kdefer's cache: retry a moment).
	if err := s.env.Client.Patch(s.ctx, pol, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"locked":["stageOut"]}}`))); err != nil {
		t.Fatal(err)
	}
	locked := plainJob("locked")
	locked.Annotations = map[string]string{v1.AnnotationSkip: "true"}
	refusal := `annotation kdefer.io/skip: opts out, but ClusterDeferPolicy "` + pol.Name + `" selects namespace ` + s.ns
	err = clusterenv.WaitFor(s.ctx, 30*time.Second, "the webhook to see the locked policy", func(ctx context.Context) (bool, error) {
		err := s.env.Client.Create(ctx, locked.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), refusal), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.env.Client.Create(s.ctx, locked); err == nil || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("a Job opting out of a locked ClusterDeferPolicy: %v, want refused with %q", err, refusal)
	} else {
		s.logf("refused: %v", err)
	}
	s.cleanUp("plain", "skipped")
}
