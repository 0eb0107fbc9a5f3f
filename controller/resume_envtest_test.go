package controller_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// TestResume: a failed run whose volume is kept recovers instead of staying
// failed. `kdefer retry` (the kdefer.io/retry annotation) resumes a run
// whose defer step failed: a new defer pod runs that step alone, the
// stage-out that succeeded is not run again, and the status keeps the
// failed attempt. A run that failed because its node was lost resumes by
// itself when the node is Ready again.
func TestResume(t *testing.T) {
	h := newHarness(t)
	h.start()
	ns := h.namespace("resume")
	pol := &v1.DeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: "notify", Namespace: ns}, Spec: v1.DeferPolicySpec{
		StageOut:        &v1.StageOut{URL: "s3://bucket/{namespace}/{pod}/"},
		DeferContainers: []corev1.Container{{Name: "notify", Image: "busybox"}},
		NodeLostTimeout: &metav1.Duration{Duration: 2 * time.Second},
	}}
	must(t, h.c.Create(context.Background(), pol))
	withPolicy := func(p *corev1.Pod) { p.Annotations[v1.AnnotationPolicy] = pol.Name }

	t.Run("retry", func(t *testing.T) {
		h.t = t
		failures, resumes := metric(t, "kdefer_run_failures_total", "reason", v1.ReasonRetriesExhausted), metric(t, "kdefer_run_resumes_total", "cause", v1.ReasonRetryRequested)
		succeeded := metric(t, "kdefer_run_duration_seconds", "result", v1.DeferRunSucceeded)
		_, pod := h.managedJobPod(ns, "retry", withPolicy)
		run := h.waitArmed(pod)
		h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 1, "Error", corev1.PodFailed, "") })
		dp := h.waitDeferPod(run)
		h.eventually("the run counted in flight", func() (bool, error) { return metric(t, "kdefer_runs_in_flight") == 1, nil })
		// stage-out succeeded, notify failed past the retry limit.
		h.updatePodStatus(dp, func(p *corev1.Pod) {
			kt.FinishDeferPod(p, 0, 0, okSummary, false)
			p.Status.ContainerStatuses[0].RestartCount = 4
			p.Status.ContainerStatuses[0].State.Terminated.ExitCode = 1
			p.Status.Phase = corev1.PodRunning
		})
		h.waitFinished(run, v1.DeferRunFailed)
		if h.pvcDeleting(pod) {
			t.Fatal("work volume released after the failure; want it kept")
		}
		pvc := &corev1.PersistentVolumeClaim{}
		must(t, h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod.Name + "-" + v1.DefaultWorkVolumeName}, pvc))
		size := pvc.Spec.Resources.Requests.Storage().Value()
		h.eventually("the kept volume in the metrics", func() (bool, error) {
			return metric(t, "kdefer_retained_volumes") == 1 && metric(t, "kdefer_retained_volume_bytes") == float64(size) &&
				metric(t, "kdefer_retained_volume_oldest_seconds") > 0 && metric(t, "kdefer_runs_in_flight") == 0, nil
		})
		if size == 0 || metric(t, "kdefer_run_failures_total", "reason", v1.ReasonRetriesExhausted) != failures+1 {
			t.Errorf("work PVC size %d, kdefer_run_failures_total{reason=RetriesExhausted} %v, want > 0 and %v", size,
				metric(t, "kdefer_run_failures_total", "reason", v1.ReasonRetriesExhausted), failures+1)
		}

		// finish stopped the running defer pod; its kubelet would remove it.
		h.deletePod(dp, 0)
		h.annotate(run, v1.AnnotationRetry, "2026-12-01T16:00:00Z")
		dp = h.waitAttempt(run, "1")
		if len(dp.Spec.InitContainers) != 0 || len(dp.Spec.Containers) != 1 || dp.Spec.Containers[0].Name != "notify" {
			t.Fatalf("resumed defer pod runs %v then %v; want notify alone", dp.Spec.InitContainers, dp.Spec.Containers)
		}
		h.waitEvent(run, v1.ReasonRetryRequested)
		h.finishDeferPod(dp, 0, 0, nil)
		h.waitFinished(run, v1.DeferRunSucceeded)
		rt := run.Status.Retries
		if rt == nil || rt.Count != 1 || rt.HandledRequest != "2026-12-01T16:00:00Z" || len(rt.History) != 1 ||
			rt.History[0].Reason != v1.ReasonRetriesExhausted || rt.History[0].ResumedBy != v1.ReasonRetryRequested {
			t.Errorf("status.retries = %+v; want one RetriesExhausted attempt resumed by RetryRequested", rt)
		}
		if len(run.Status.Steps) != 2 || run.Status.Steps[0].Name != v1.StageOutStepName || *run.Status.Steps[0].ExitCode != 0 || run.Status.Objects != okSummary.Objects {
			t.Errorf("status.steps %+v objects %d: want the first attempt's stage-out kept", run.Status.Steps, run.Status.Objects)
		}
		h.eventually("work volume released after the retry succeeded", func() (bool, error) { return h.pvcGone(pod) })
		h.eventually("no volume kept in the metrics", func() (bool, error) {
			return metric(t, "kdefer_retained_volumes") == 0 && metric(t, "kdefer_retained_volume_bytes") == 0, nil
		})
		if got := metric(t, "kdefer_run_resumes_total", "cause", v1.ReasonRetryRequested); got != resumes+1 {
			t.Errorf("kdefer_run_resumes_total{cause=RetryRequested} = %v, want %v", got, resumes+1)
		}
		if got := metric(t, "kdefer_run_duration_seconds", "result", v1.DeferRunSucceeded); got != succeeded+1 {
			t.Errorf("kdefer_run_duration_seconds{result=Succeeded} count = %v, want %v", got, succeeded+1)
		}

		// Asked again of a run that did not fail: refused and consumed.
		h.annotate(run, v1.AnnotationRetry, "again")
		h.waitEvent(run, v1.EventRetryRefused)
		must(t, h.get(run))
		if run.Status.Retries.Count != 1 || run.Status.State != v1.DeferRunSucceeded {
			t.Errorf("after a refused retry: count %d, state %s", run.Status.Retries.Count, run.Status.State)
		}
	})

	// nodeReturns brings the lost node back, as its kubelet would: a defer
	// pod the controller stopped while the node was away ends with it
	// (nothing but the node's kubelet completes that deletion), then the
	// run resumes there.
	nodeReturns := func(t *testing.T, pod *corev1.Pod, run *v1.DeferRun) {
		t.Helper()
		h.waitFinished(run, v1.DeferRunFailed)
		if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed); c.Reason != v1.ReasonNodeLost {
			t.Fatalf("Failed reason %s, want NodeLost", c.Reason)
		}
		if h.pvcDeleting(pod) {
			t.Fatal("work volume released after NodeLost; want it kept for the node's return")
		}
		h.setNodeReady(corev1.ConditionTrue)
		stale := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: v1.DeferPodName(run), Namespace: run.Namespace}}
		if err := h.get(stale); err == nil && stale.Annotations[v1.AnnotationAttempt] == "" {
			h.deletePod(stale, 0)
		}
		dp := h.waitAttempt(run, "1")
		if dp.Spec.NodeName != node {
			t.Errorf("resumed defer pod on node %q, want %s (the volume is there)", dp.Spec.NodeName, node)
		}
		h.finishDeferPod(dp, 0, 0, okSummary)
		h.waitFinished(run, v1.DeferRunSucceeded)
		if rt := run.Status.Retries; rt == nil || rt.Count != 1 || rt.History[0].Reason != v1.ReasonNodeLost || rt.History[0].ResumedBy != v1.ReasonNodeReturned {
			t.Errorf("status.retries = %+v; want one NodeLost attempt resumed by NodeReturned", rt)
		}
		h.waitEvent(run, v1.ReasonNodeReturned)
	}

	t.Run("node returns", func(t *testing.T) {
		h.t = t
		_, pod := h.managedJobPod(ns, "lost", withPolicy)
		run := h.waitArmed(pod)
		h.setNodeReady(corev1.ConditionUnknown)
		h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 137, "Error", corev1.PodFailed, "") })
		nodeReturns(t, pod, run)
	})

	// The node is lost while the defer pod runs on it: the controller stops
	// that pod (its deletion waits for the kubelet), and on the node's
	// return the run resumes only once the stopped pod is gone, with a new
	// one under the same name.
	t.Run("node returns while its defer pod was stopped", func(t *testing.T) {
		h.t = t
		_, pod := h.managedJobPod(ns, "lost-running", withPolicy)
		run := h.waitArmed(pod)
		h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 137, "Error", corev1.PodFailed, "") })
		dp := h.waitDeferPod(run)
		h.setNodeReady(corev1.ConditionUnknown)
		h.eventually("the running defer pod stopped", func() (bool, error) {
			err := h.get(dp)
			return err == nil && dp.DeletionTimestamp != nil, err
		})
		nodeReturns(t, pod, run)
	})
}

// annotate sets an annotation on obj, as kubectl annotate (or the kdefer
// CLI) would.
func (h *harness) annotate(obj client.Object, key, value string) {
	h.t.Helper()
	h.eventually("annotation "+key+" set", func() (bool, error) {
		if err := h.get(obj); err != nil {
			return false, err
		}
		a := obj.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[key] = value
		obj.SetAnnotations(a)
		err := h.c.Update(context.Background(), obj)
		return err == nil, client.IgnoreAlreadyExists(err)
	})
}

// waitAttempt waits for the run's defer pod of the given attempt.
func (h *harness) waitAttempt(run *v1.DeferRun, attempt string) *corev1.Pod {
	h.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: v1.DeferPodName(run), Namespace: run.Namespace}}
	h.eventually("defer pod of attempt "+attempt, func() (bool, error) {
		err := h.get(p)
		return err == nil && p.Annotations[v1.AnnotationAttempt] == attempt, client.IgnoreNotFound(err)
	})
	return p
}

// setNodeReady sets the node's Ready condition, as its kubelet (or the node
// lifecycle controller) would.
func (h *harness) setNodeReady(s corev1.ConditionStatus) {
	h.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	h.eventually("node Ready "+string(s), func() (bool, error) {
		if err := h.get(n); err != nil {
			return false, err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		err := h.c.Status().Update(context.Background(), n)
		return err == nil, nil
	})
}
