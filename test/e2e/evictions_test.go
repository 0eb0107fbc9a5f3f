//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// Pods removed by the cluster's own controllers, each with its
// DisruptionTarget reason, and a forced deletion.

// preemptSlot is an extended resource the preemption scenario advertises on
// the node, one unit: the Job's pod takes it, so a higher-priority pod asking
// for it fits only if the scheduler preempts exactly that pod (CPU or memory
// would make every pod of the parallel scenarios a candidate victim).
const preemptSlot corev1.ResourceName = "e2e.kdefer.io/preempt-slot"

// TestPreemptedByScheduler: a pod of a higher priority class needs what the
// Job's pod holds; the scheduler preempts the Job's pod (DisruptionTarget
// PreemptionByScheduler, then a graceful delete) and the run stages out with
// trigger Preempted.
func TestPreemptedByScheduler(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "preempt")
	s.advertise(preemptSlot, "1")
	high := s.priorityClass("kdefer-e2e-preemptor", 1000)
	w := small
	w.mode = "hold"
	job := s.job("sim", w)
	slot := corev1.ResourceList{preemptSlot: mustQ("1")}
	job.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: slot, Limits: slot}
	s.create(job)
	pod := s.waitReady(time.Minute)
	s.recordPVs()
	preemptor := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "preemptor", Namespace: s.ns},
		Spec:       s.podSpec("main", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"),
	}
	preemptor.Spec.PriorityClassName = high
	preemptor.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: slot, Limits: slot}
	s.create(preemptor)
	t.Cleanup(func() { s.deletePod("preemptor") })
	run := s.waitFinished(pod, v1.TriggerPreempted, v1.DeferRunSucceeded, 3*time.Minute)
	s.checkOutputs("sim", pod, w, v1.TriggerPreempted)
	s.volumeReleased(run)
	s.podGone(pod, time.Minute)
	// The preemptor gets the slot once its victim is gone.
	if _, err := s.env.WaitPod(s.ctx, s.ns, "preemptor", time.Minute, "scheduled", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" }); err != nil {
		t.Error(err)
	}
	s.deletePod("preemptor")
	s.cleanUp("sim")
}

// e2eTaint is the NoExecute taint of the taint-eviction scenario; the
// local overlay's kdefer-controller tolerates it (a single node: a manager
// evicted by it could not come back while the taint is there).
const e2eTaint = "e2e.kdefer.io/no-execute"

// TestTaintEviction: a NoExecute taint the Job's pod does not tolerate
// makes the taint-eviction controller delete it (DisruptionTarget
// DeletionByTaintManager); the run stages out with trigger TaintEviction.
// On a node of its own (reserveNode): the taint evicts every pod on the
// node that does not tolerate it.
func TestTaintEviction(t *testing.T) {
	s := newScenario(t, "taint", onNode(reserveNode(t, nodeDisk)))
	w := small
	w.mode = "hold"
	s.create(s.job("sim", w))
	pod := s.waitReady(time.Minute)
	s.recordPVs()
	untaint := func() { _, _ = kubectl(context.Background(), "taint", "node", s.node, e2eTaint+":NoExecute-") }
	t.Cleanup(untaint)
	if out, err := kubectl(s.ctx, "taint", "node", s.node, e2eTaint+"=evict:NoExecute"); err != nil {
		t.Fatalf("taint the node: %v: %s", err, out)
	}
	p, err := s.env.WaitPod(s.ctx, s.ns, pod, time.Minute, "marked for deletion by the taint manager", func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Only this pod was meant: the taint goes as soon as it has done that.
	untaint()
	if c := disruptionTarget(p); c == nil || c.Reason != "DeletionByTaintManager" {
		t.Errorf("pod %s: DisruptionTarget %+v, want reason DeletionByTaintManager", pod, c)
	}
	run := s.waitFinished(pod, v1.TriggerTaintEviction, v1.DeferRunSucceeded, 3*time.Minute)
	s.checkOutputs("sim", pod, w, v1.TriggerTaintEviction)
	s.volumeReleased(run)
	s.podGone(pod, time.Minute)
	s.cleanUp("sim")
}

// TestForceDeletedSkipped: `kubectl delete pod --force --grace-period=0`
// while the main container runs: nothing is staged out (the containers may
// still be writing), no defer pod runs, and the volume is released.
func TestForceDeletedSkipped(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "force")
	w := small
	w.mode = "hold"
	s.create(s.job("sim", w))
	pod := s.waitReady(time.Minute)
	s.recordPVs()
	if err := s.env.Clientset.CoreV1().Pods(s.ns).Delete(s.ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	run := s.waitFinished(pod, v1.TriggerDeleted, v1.DeferRunSkipped, 2*time.Minute)
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunSkipped); c == nil || c.Reason != v1.ReasonForceDeleted {
		t.Errorf("Skipped condition %+v, want reason %s", c, v1.ReasonForceDeleted)
	}
	if run.Status.DeferPodName != "" {
		t.Errorf("a forced deletion started defer pod %s", run.Status.DeferPodName)
	}
	s.volumeReleased(run)
	s.noOutputs("sim", pod)
	s.podGone(pod, time.Minute)
	s.cleanUp("sim")
}

func disruptionTarget(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// advertise adds an extended resource to the node's capacity (as a device
// plugin or an administrator would) until the test ends; the kubelet keeps
// such resources in its status updates.
func (s *scenario) advertise(name corev1.ResourceName, qty string) {
	s.t.Helper()
	key := strings.ReplaceAll(string(name), "/", "~1") // a JSON pointer's escaped "/"
	patch := func(op string) []byte {
		var ops []string
		for _, field := range []string{"capacity", "allocatable"} {
			if op == "add" {
				ops = append(ops, fmt.Sprintf(`{"op":"add","path":"/status/%s/%s","value":%q}`, field, key, qty))
			} else {
				ops = append(ops, fmt.Sprintf(`{"op":"remove","path":"/status/%s/%s"}`, field, key))
			}
		}
		return []byte("[" + strings.Join(ops, ",") + "]")
	}
	nodes := s.env.Clientset.CoreV1().Nodes()
	if _, err := nodes.Patch(s.ctx, s.node, types.JSONPatchType, patch("add"), metav1.PatchOptions{}, "status"); err != nil {
		s.t.Fatalf("advertise %s on node %s: %v", name, s.node, err)
	}
	s.t.Cleanup(func() {
		if _, err := nodes.Patch(context.Background(), s.node, types.JSONPatchType, patch("remove"), metav1.PatchOptions{}, "status"); err != nil {
			s.t.Errorf("remove %s from node %s: %v", name, s.node, err)
		}
	})
}

// priorityClass creates a cluster-wide PriorityClass for the test's lifetime.
func (s *scenario) priorityClass(name string, value int32) string {
	s.t.Helper()
	pcs := s.env.Clientset.SchedulingV1().PriorityClasses()
	_, err := pcs.Create(s.ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value,
		PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority),
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		s.t.Fatalf("create PriorityClass %s: %v", name, err)
	}
	s.t.Cleanup(func() { _ = pcs.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// deletePod deletes a helper pod of the scenario at once (grace 0).
func (s *scenario) deletePod(name string) {
	err := s.env.Clientset.CoreV1().Pods(s.ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		s.t.Errorf("delete pod %s: %v", name, err)
	}
}
