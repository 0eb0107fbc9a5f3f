package controller_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	ct "github.com/kdefer/kdefer/controller/testing/clienttest"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

// jobTrackingFinalizer is the Job controller's pod finalizer: it counts a
// pod (succeeded, failed, ignored by the pod failure policy) and then
// removes it.
const jobTrackingFinalizer = "batch.kubernetes.io/job-tracking"

// TestIndexedJobFailurePolicy: kdefer's finalizer holds a pod of an Indexed
// Job with backoffLimitPerIndex and a podFailurePolicy (Ignore on
// DisruptionTarget, FailIndex on exit 42) without touching what the Job
// controller's accounting reads, so the Job controller behaves as it
// documents: every attempt of an index gets its own run (with the index), the
// pod's phase, conditions and exit codes stay as the kubelet and the eviction
// wrote them, kdefer never deletes a pod (a deleted pod counts as failed), and
// it removes only its own finalizer, never the Job controller's. envtest has no
// Job controller, so the counting itself is the e2e scenario's
// (test/e2e/indexed_test.go); this pins what it relies on.
func TestIndexedJobFailurePolicy(t *testing.T) {
	t.Parallel() // see newHarness
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	ns := h.namespace("indexed")

	job := rt.MakeJob("sweep", ns).Indexed(3, 3).StageOut("s3://bucket/{job}/{index}/{uid}/").
		PodFailurePolicy(&batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
			{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
			{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
		}}).Obj()
	job.Spec.BackoffLimit = nil
	job.Spec.BackoffLimitPerIndex = ptr.To[int32](1)
	job.Spec.MaxFailedIndexes = ptr.To[int32](1)
	job.Spec.Template.Labels = map[string]string{"app": "sweep"}
	job.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sweep"}}
	job.Spec.ManualSelector = ptr.To(true)
	must(t, h.c.Create(ctx, job))

	// Two attempts of index 1, as the Job controller makes them: the first
	// is evicted through the Eviction API (DisruptionTarget, deleted: the
	// policy ignores it), the second exits 42 (the policy fails the index).
	attempt := func(name string) *corev1.Pod {
		p := kt.MakePod(name, ns).OnNode(node).OwnedByJob(job.Name, job.UID).
			Annotation(batchv1.JobCompletionIndexAnnotation, "1").Annotation(v1.AnnotationStageOut, "s3://bucket/{job}/{index}/{uid}/").Obj()
		p.UID, p.Status = "", corev1.PodStatus{}
		p.Labels[batchv1.JobCompletionIndexAnnotation] = "1"
		p.Finalizers = append(p.Finalizers, jobTrackingFinalizer)
		must(t, h.c.Create(ctx, p))
		must(t, ct.SetRunning(ctx, h.c, p))
		must(t, h.c.Create(ctx, kt.ClaimFor(p, v1.DefaultWorkVolumeName)))
		return p
	}
	evicted, failed := attempt("sweep-1-a"), attempt("sweep-1-b")
	runs := map[string]*v1.DeferRun{}
	for _, p := range []*corev1.Pod{evicted, failed} {
		runs[p.Name] = h.waitArmed(p)
	}
	h.updatePodStatus(evicted, func(p *corev1.Pod) {
		kt.Terminate(p, 143, "Error", corev1.PodFailed, "", kt.DisruptionTarget("EvictionByEvictionAPI"))
	})
	h.deletePod(evicted, 30)
	h.updatePodStatus(failed, func(p *corev1.Pod) { kt.Terminate(p, 42, "Error", corev1.PodFailed, "") })
	// What the Job controller's accounting reads, as written above.
	written := map[string]corev1.PodStatus{}
	for _, p := range []*corev1.Pod{evicted, failed} {
		must(t, h.get(p))
		written[p.Name] = p.Status
	}

	for _, p := range []*corev1.Pod{evicted, failed} {
		run := runs[p.Name]
		if run.Spec.CompletionIndex == nil || *run.Spec.CompletionIndex != 1 || run.Spec.JobName != job.Name {
			t.Errorf("%s: run index %v job %q, want index 1 of %s", p.Name, run.Spec.CompletionIndex, run.Spec.JobName, job.Name)
		}
		dp := h.waitDeferPod(run)
		if got := env(dp, stagecontract.EnvIndex); got != "1" {
			t.Errorf("%s: defer pod %s=%q, want 1", p.Name, stagecontract.EnvIndex, got)
		}
		h.finishDeferPod(dp, 0, 0, okSummary)
		h.waitFinished(run, v1.DeferRunSucceeded)
		h.waitPodReleased(p)
	}
	if runs[evicted.Name].UID == runs[failed.Name].UID {
		t.Error("two attempts of one index share a run")
	}
	for _, p := range []*corev1.Pod{evicted, failed} {
		got := &corev1.Pod{}
		must(t, h.c.Get(ctx, client.ObjectKeyFromObject(p), got))
		if !slices.Contains(got.Finalizers, jobTrackingFinalizer) || slices.Contains(got.Finalizers, v1.PodFinalizer) {
			t.Errorf("%s: finalizers %v, want the Job controller's only", p.Name, got.Finalizers)
		}
		if diff := cmp.Diff(written[p.Name], got.Status); diff != "" {
			t.Errorf("%s: kdefer changed the status the Job controller counts (-written +now):\n%s", p.Name, diff)
		}
		if p == failed && got.DeletionTimestamp != nil {
			t.Errorf("%s: kdefer deleted a pod the Job controller has not counted", p.Name)
		}
	}
}
