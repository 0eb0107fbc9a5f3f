package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	kt "github.com/kdefer/kdefer/controller/testing"
)

// TestRefusal: a defer pod the kubelet refused at admission or ended for
// its node's sake is recognised by its reason (one case per reason, in the
// kubelet's words); a pod whose own steps or deadline ended it is not.
func TestRefusal(t *testing.T) {
	failed := func(reason, msg string) *corev1.Pod {
		return kt.MakePod("p-defer", "ns").Phase(corev1.PodFailed).Reason(reason, msg).Obj()
	}
	refused := map[string]*corev1.Pod{
		"OutOfcpu":                       failed("OutOfcpu", "Pod was rejected: Node didn't have enough resource: cpu, requested: 50, used: 2000, capacity: 2000"),
		"OutOfmemory":                    failed("OutOfmemory", "Pod was rejected: Node didn't have enough resource: memory, requested: 67108864, used: 4294967296, capacity: 4294967296"),
		"OutOfpods":                      failed("OutOfpods", "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110"),
		"OutOfephemeral-storage":         failed("OutOfephemeral-storage", "Pod was rejected: Node didn't have enough resource: ephemeral-storage"),
		"OutOfDisk":                      failed("OutOfDisk", "Pod was rejected: the node has insufficient disk"),
		"Evicted":                        failed("Evicted", "Pod was rejected: The node had condition: [DiskPressure]. "),
		"UnexpectedAdmissionError":       failed("UnexpectedAdmissionError", "Pod was rejected: Allocate failed due to can't allocate unhealthy devices"),
		"UnexpectedPredicateFailureType": failed("UnexpectedPredicateFailureType", "Pod was rejected: GeneralPredicates failed due to ..."),
		"InvalidNodeInfo":                failed("InvalidNodeInfo", "Pod was rejected: Kubelet cannot get node info."),
		"NodeAffinity":                   failed("NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"),
		"NodeName":                       failed("NodeName", "Pod was rejected: Predicate NodeName failed"),
		"NodePorts":                      failed("NodePorts", "Pod was rejected: Predicate NodePorts failed"),
		"NodeShutdown":                   failed("NodeShutdown", "Pod was rejected as the node is shutting down."),
		"TaintToleration":                failed("TaintToleration", "Pod was rejected: Predicate TaintToleration failed: node(s) had untolerated taint"),
		"Preempting":                     failed("Preempting", "Preempted in order to admit critical pod"),
		"Terminated":                     failed("Terminated", "Pod was terminated in response to imminent node shutdown."),
		"Shutdown":                       failed("Shutdown", "Shutdown manager terminated the pod"),
		"EvictionByEvictionAPI":          kt.MakePod("p-defer", "ns").Failed().DisruptionTarget("EvictionByEvictionAPI", "Eviction API: evicting").Obj(),
		"PreemptionByScheduler":          kt.MakePod("p-defer", "ns").Failed().DisruptionTarget("PreemptionByScheduler", "preempted").Obj(),
		"DeletionByTaintManager":         kt.MakePod("p-defer", "ns").Failed().DisruptionTarget("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint").Obj(),
		"TerminationByKubelet":           kt.MakePod("p-defer", "ns").Failed().DisruptionTarget("TerminationByKubelet", "The node was low on resource: memory.").Obj(),
	}
	// A node-pressure eviction of a running defer pod reads like this (the
	// eviction manager spares critical pods; a defer pod of another class
	// is not spared).
	refused["Evicted (running)"] = failed("Evicted", "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 512Mi. Container stage-out was using 12Ki, request is 0, has larger consumption of ephemeral-storage. ")
	for want, pod := range refused {
		t.Run(want, func(t *testing.T) {
			reason, msg, ok := Refusal(pod)
			if !ok || reason == "" || msg == "" {
				t.Fatalf("Refusal = %q, %q, %v; want recognised", reason, msg, ok)
			}
			if want != "Evicted (running)" && reason != want {
				t.Errorf("reason %q, want %q", reason, want)
			}
		})
	}
	notRefused := map[string]*corev1.Pod{
		"step failed, deadline passed": failed("DeadlineExceeded", "Pod was active on the node longer than the specified deadline"),
		"failed without a reason":      kt.MakePod("p-defer", "ns").Failed().Obj(),
		"its own /tmp past the limit":  failed("Evicted", "Usage of EmptyDir volume \"kdefer-tmp\" exceeds the limit \"1Gi\". "),
		"its own container limit":      failed("Evicted", "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. "),
		"running":                      kt.MakePod("p-defer", "ns").Phase(corev1.PodRunning).Obj(),
		"pending, refused reason text": kt.MakePod("p-defer", "ns").Phase(corev1.PodPending).Reason("OutOfcpu", "").Obj(),
		"succeeded":                    kt.MakePod("p-defer", "ns").Succeeded().Obj(),
		"failed, disruption false":     kt.MakePod("p-defer", "ns").Failed().Obj(),
	}
	notRefused["failed, disruption false"].Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse, Reason: "EvictionByEvictionAPI"}}
	for what, pod := range notRefused {
		if reason, _, ok := Refusal(pod); ok {
			t.Errorf("%s: recognised as a refusal (%s)", what, reason)
		}
	}
}

func TestRefusalBackoff(t *testing.T) {
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for i, w := range want {
		if got := refusalBackoff(int32(i + 1)); got != w {
			t.Errorf("backoff after refusal %d = %s, want %s", i+1, got, w)
		}
	}
	if got := refusalBackoff(1000); got != time.Minute {
		t.Errorf("backoff after refusal 1000 = %s, want 1m", got)
	}
}
