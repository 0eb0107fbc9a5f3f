package controller

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kdefer/kdefer/controller/podstate"
)

// refusalReasons are the pod status reasons with which a kubelet refuses to
// admit a pod, or ends one to make room, for reasons of the node's and not
// of the pod's steps: the pod is worth creating again. Besides these, every
// reason starting with "OutOf" (insufficient resources: OutOfcpu,
// OutOfmemory, OutOfpods, OutOfephemeral-storage, the old OutOfDisk) or
// "Node" (a predicate of the node: NodeAffinity, NodeName, NodePorts,
// NodeShutdown) counts.
var refusalReasons = map[string]bool{
	// The eviction manager refuses a pod under node pressure, and evicts
	// one (both with reason Evicted).
	podstate.PodReasonEvicted: true,
	// Admission handlers that failed (a device or topology manager, a
	// resize in progress) or predicates the kubelet did not expect.
	"UnexpectedAdmissionError":       true,
	"UnexpectedPredicateFailureType": true,
	"InvalidNodeInfo":                true,
	// A NoExecute taint the pod does not tolerate.
	"TaintToleration": true,
	// The kubelet's critical-pod admission evicted it for a critical pod.
	"Preempting": true,
	// A graceful node shutdown ended it.
	podstate.PodReasonTerminated: true,
	podstate.PodReasonShutdown:   true,
}

// Refusal says whether a defer pod ended because its node refused or
// evicted it, rather than because a step failed or the run's deadline
// passed, and how the node put it: such a pod is created again (with
// backoff, within the run's deadline). A kubelet eviction for the pod's own
// limits (its /tmp emptyDir past its sizeLimit: "exceeds the limit") is the
// pod's failure, not a refusal; so is DeadlineExceeded.
func Refusal(pod *corev1.Pod) (reason, message string, ok bool) {
	if pod.Status.Phase != corev1.PodFailed {
		return "", "", false
	}
	reason, message = pod.Status.Reason, pod.Status.Message
	switch {
	case reason == podstate.PodReasonEvicted && strings.Contains(message, "exceed"):
		return "", "", false
	case refusalReasons[reason], strings.HasPrefix(reason, "OutOf"), strings.HasPrefix(reason, "Node"):
		return reason, message, true
	case reason == "":
		// Evicted through the API, preempted by the scheduler, removed by
		// the taint manager, or ended by the kubelet (which all say so in
		// condition DisruptionTarget) after it started.
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				return c.Reason, c.Message, true
			}
		}
	}
	return "", "", false
}

// refusalBackoff is how long after its nth refusal a defer pod is created
// again: 2 s, doubling, at most a minute. A node under pressure stays so
// for evictionPressureTransitionPeriod (5 min by default) after the
// pressure was last seen; a burst that filled it frees it as pods end.
func refusalBackoff(n int32) time.Duration {
	d := 2 * time.Second
	for i := int32(1); i < n && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}
