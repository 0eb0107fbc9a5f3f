package controller_test

import (
	"context"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// A stage-out that saved every file it could but not all (exit 0, unsaved >
// 0 in its summary): the run succeeds, says Incomplete (condition and its
// own event), records how many files were not saved, and keeps the volume:
// nothing that was not saved is released.
func testIncomplete(h *harness) {
	ns := h.namespace("incomplete")
	_, pod := h.managedJobPod(ns, "partial")
	run := h.waitArmed(pod)
	h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 1, "Error", corev1.PodFailed, "") })
	sum := *okSummary
	sum.Unsaved = 2
	h.finishDeferPod(h.waitDeferPod(run), 0, 0, &sum)
	h.waitFinished(run, v1.DeferRunSucceeded)
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunIncomplete)
	if c == nil || c.Status != "True" || c.Reason != v1.ReasonUnsavedFiles {
		h.t.Fatalf("Incomplete condition %+v, want True with reason UnsavedFiles", c)
	}
	if meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunVolumeReleased) {
		h.t.Error("an incomplete run released its volume")
	}
	h.waitPodReleased(pod)
	if h.pvcDeleting(pod) {
		h.t.Error("the PVC of an incomplete run is being deleted; want it retained")
	}
	if run.Status.Unsaved != 2 {
		h.t.Errorf("status.unsaved = %d, want 2", run.Status.Unsaved)
	}
	if got := testutil.ToFloat64(controller.Metrics.Incomplete); got < 1 {
		h.t.Errorf("kdefer_runs_incomplete_total = %v, want at least 1", got)
	}
	h.eventually("the Incomplete event", func() (bool, error) {
		var evs eventsv1.EventList
		if err := h.c.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == v1.EventIncomplete && e.Regarding.Kind == "DeferRun" && e.Regarding.Name == run.Name {
				return true, nil
			}
		}
		return false, nil
	})
}
