package controller_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// TestMaxDeadline: the cluster-wide maximum (kdefer-controller
// --max-deadline) caps a Job's longer deadline; the defer pod's
// activeDeadlineSeconds and the run's status.deadline say so, and a shorter
// deadline is left alone.
func TestMaxDeadline(t *testing.T) {
	t.Parallel() // see newHarness
	h := newHarness(t)
	h.deferPod.MaxDeadline = time.Hour
	h.start()
	ns := h.namespace("maxdeadline")
	for _, tc := range []struct {
		name, asked string
		want        time.Duration
	}{
		{"capped", "48h", time.Hour},
		{"within", "20m", 20 * time.Minute},
	} {
		_, pod := h.managedJobPod(ns, tc.name, func(p *corev1.Pod) { p.Annotations[v1.AnnotationDeadline] = tc.asked })
		run := h.waitArmed(pod)
		h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 0, "Completed", corev1.PodSucceeded, "") })
		dp := h.waitDeferPod(run)
		if got := *dp.Spec.ActiveDeadlineSeconds; got != int64(tc.want/time.Second) {
			t.Errorf("%s: defer pod activeDeadlineSeconds = %d, want %d", tc.name, got, int64(tc.want/time.Second))
		}
		h.finishDeferPod(dp, 0, 0, okSummary)
		h.waitFinished(run, v1.DeferRunSucceeded)
		if d := run.Status.Deadline; d == nil || d.Duration != tc.want {
			t.Errorf("%s: status.deadline = %v, want %s", tc.name, d, tc.want)
		}
	}
}
