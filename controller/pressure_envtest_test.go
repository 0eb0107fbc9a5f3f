package controller_test

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// TestDeferPodCritical: the apiserver takes a defer pod at
// system-node-critical outside kube-system, with its explicit zero requests
// kept (not defaulted to the limits) and its priority resolved; a manager
// class the apiserver refuses (here: none of that name) leaves the defer pod
// without one, with a Warning event, instead of without a defer pod.
func TestDeferPodCritical(t *testing.T) {
	t.Parallel() // see newHarness
	for _, tc := range []struct {
		name, class string
		want        int32 // resolved priority
		refused     bool
	}{
		{"critical", controller.DefaultDeferPriorityClass, 2000001000, false},
		{"refused", "no-such-class", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.deferPod.PriorityClassName = tc.class
			h.start()
			ns := h.namespace("prio")
			_, pod := h.managedJobPod(ns, "p")
			run := h.waitArmed(pod)
			h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 137, "Error", corev1.PodFailed, "Evicted") })
			dp := h.waitDeferPod(run)
			got := ""
			if !tc.refused {
				got = tc.class
			}
			if dp.Spec.PriorityClassName != got || dp.Spec.Priority == nil || *dp.Spec.Priority != tc.want {
				t.Fatalf("defer pod priority class %q (%v), want %q (%d)", dp.Spec.PriorityClassName, dp.Spec.Priority, got, tc.want)
			}
			for _, c := range append(append([]corev1.Container{}, dp.Spec.InitContainers...), dp.Spec.Containers...) {
				if cpu, mem := c.Resources.Requests.Cpu(), c.Resources.Requests.Memory(); !cpu.IsZero() || !mem.IsZero() {
					t.Errorf("step %s requests cpu %v memory %v as stored, want 0", c.Name, cpu, mem)
				}
			}
			if tc.refused {
				h.waitEvent(run, v1.EventPriorityRefused)
			}
		})
	}
}

// waitEvent waits for an event with reason about run.
func (h *harness) waitEvent(run *v1.DeferRun, reason string) {
	h.t.Helper()
	h.eventually("a "+reason+" event", func() (bool, error) {
		var evs eventsv1.EventList
		if err := h.c.List(context.Background(), &evs, client.InNamespace(run.Namespace)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == reason && e.Regarding.Name == run.Name && e.Regarding.Kind == "DeferRun" {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestDeferPodRefusedRecreated: a defer pod its node refuses (OutOfcpu, as
// in a 40-pod burst) is not a failed run: the run counts the refusal in
// status.refusals with a Warning event, a new defer pod of the same name is
// created after the backoff, and the run succeeds with it.
func TestDeferPodRefusedRecreated(t *testing.T) {
	h := newHarness(t)
	h.start()
	ns := h.namespace("refused")
	refusals := metric(t, "kdefer_defer_pod_refusals_total", "reason", "OutOfcpu")
	_, pod := h.managedJobPod(ns, "p")
	run := h.waitArmed(pod)
	h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 137, "Error", corev1.PodFailed, "Evicted") })
	first := h.waitDeferPod(run)
	h.updatePodStatus(first, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Reason = "OutOfcpu"
		p.Status.Message = "Pod was rejected: Node didn't have enough resource: cpu, requested: 50, used: 2000, capacity: 2000"
	})
	h.eventually("the refusal counted", func() (bool, error) {
		if err := h.get(run); err != nil {
			return false, err
		}
		if meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunFailed) {
			t.Fatalf("run failed on a refused defer pod: %+v", run.Status.Conditions)
		}
		rf := run.Status.Refusals
		return rf != nil && rf.Count == 1 && rf.LastReason == "OutOfcpu", nil
	})
	h.waitEvent(run, v1.ReasonDeferPodRefused)
	if got := metric(t, "kdefer_defer_pod_refusals_total", "reason", "OutOfcpu"); got != refusals+1 {
		t.Errorf("kdefer_defer_pod_refusals_total{reason=OutOfcpu} = %v, want %v", got, refusals+1)
	}
	second := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: first.Name, Namespace: ns}}
	h.eventually("a new defer pod", func() (bool, error) {
		err := h.get(second)
		return err == nil && second.UID != first.UID, client.IgnoreNotFound(err)
	})
	if d := *second.Spec.ActiveDeadlineSeconds; d > *first.Spec.ActiveDeadlineSeconds || d < 1 {
		t.Errorf("second defer pod's activeDeadlineSeconds %d, want what is left of the first's %d", d, *first.Spec.ActiveDeadlineSeconds)
	}
	h.finishDeferPod(second, 0, 0, okSummary)
	h.waitFinished(run, v1.DeferRunSucceeded)
	if err := h.get(run); err != nil || run.Status.Refusals == nil || run.Status.Refusals.Count != 1 {
		t.Fatalf("after success: refusals %+v (%v), want the one kept", run.Status.Refusals, err)
	}
}

// TestEndedPodDeleted: after a successful stage-out on trigger Evicted,
// kdefer deletes the evicted pod itself once the Job controller has counted
// it (its tracking finalizer gone), so pvc-protection lets the released
// work volume go; after trigger Failed (policy default OnPressure) the pod is
// left to the Job.
func TestEndedPodDeleted(t *testing.T) {
	t.Parallel() // see newHarness
	h := newHarness(t)
	h.start()
	ns := h.namespace("ended")
	ctx := context.Background()
	_, evicted := h.managedJobPod(ns, "evicted", func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, batchv1.JobTrackingFinalizer) })
	_, failed := h.managedJobPod(ns, "failed")
	evRun, failRun := h.waitArmed(evicted), h.waitArmed(failed)
	h.updatePodStatus(evicted, func(p *corev1.Pod) { kt.Terminate(p, 137, "Error", corev1.PodFailed, "Evicted") })
	h.updatePodStatus(failed, func(p *corev1.Pod) { kt.Terminate(p, 1, "Error", corev1.PodFailed, "") })
	h.finishDeferPod(h.waitDeferPod(evRun), 0, 0, okSummary)
	h.finishDeferPod(h.waitDeferPod(failRun), 0, 0, okSummary)
	h.waitFinished(evRun, v1.DeferRunSucceeded)
	h.waitFinished(failRun, v1.DeferRunSucceeded)
	h.waitPodReleased(failed)

	// Not counted by the Job controller yet: kept.
	time.Sleep(2 * time.Second)
	p := &corev1.Pod{}
	must(t, h.c.Get(ctx, client.ObjectKeyFromObject(evicted), p))
	if p.DeletionTimestamp != nil {
		t.Fatal("evicted pod deleted while it still has the Job's tracking finalizer")
	}
	h.eventually("the Job's tracking finalizer removed", func() (bool, error) {
		if err := h.c.Get(ctx, client.ObjectKeyFromObject(evicted), p); err != nil {
			return false, err
		}
		orig := p.DeepCopy()
		controllerutil.RemoveFinalizer(p, batchv1.JobTrackingFinalizer)
		err := h.c.Patch(ctx, p, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		return err == nil, err
	})
	h.eventually("the evicted pod deleted", func() (bool, error) {
		err := h.c.Get(ctx, client.ObjectKeyFromObject(evicted), p)
		return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil), client.IgnoreNotFound(err)
	})
	h.waitEvent(evRun, v1.EventEndedPodDeleted)
	must(t, h.c.Get(ctx, client.ObjectKeyFromObject(failed), p))
	if p.DeletionTimestamp != nil {
		t.Fatal("a pod that ended with trigger Failed was deleted; policy OnPressure deletes only after Evicted")
	}
}
