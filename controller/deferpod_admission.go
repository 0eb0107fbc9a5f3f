package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// DefaultDeferPriorityClass is the priority class of defer pods unless the
// policy names one (kdefer-controller --defer-priority-class). It is the
// one class the kubelet admits under every node condition: its eviction
// manager admits only critical pods (priority >= 2,000,000,000) under
// DiskPressure, and critical or non-BestEffort pods under MemoryPressure, and
// a pressure condition lasts evictionPressureTransitionPeriod (5 min by
// default) after it was last seen: without it the defer pod of a pod the
// kubelet evicted for disk pressure is refused, the case kdefer exists
// for. The eviction manager never evicts a critical pod, and the kubelet
// gives node-critical pods the OOM score adjustment of Guaranteed ones.
const DefaultDeferPriorityClass = "system-node-critical"

// requestedResources are the resources the kubelet's admission sums over a
// node's pods and compares with its allocatable.
var requestedResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}

// zeroRequests is the requests of every defer-pod container.
func zeroRequests() corev1.ResourceList {
	rl := corev1.ResourceList{}
	for _, r := range requestedResources {
		rl[r] = resource.Quantity{Format: resource.DecimalSI}
	}
	return rl
}

// admissible makes pod one its node admits whatever else runs there, and
// whatever its condition:
//
//   - The priority class: the policy's, else opts.PriorityClassName
//     (DefaultDeferPriorityClass unless the manager says otherwise).
//
//   - No container requests CPU, memory or ephemeral storage, explicitly
//     (requests left out would default to the limits). A defer pod bypasses
//     the scheduler (nodeName), so the only resource check it meets is the
//     kubelet's admission, which refuses a pod whose requests exceed the
//     node's allocatable minus what its running pods request (OutOfcpu,
//     OutOfmemory, ...), and skips every resource whose request is zero:
//     40 defer pods of 50m each filled a 2-core node and the last two were
//     refused OutOfcpu. Zero requests are also what keeps the critical
//     priority from costing anyone else: the kubelet's critical-pod
//     admission evicts running pods only to free resources a refused
//     critical pod requested; a pod that requests nothing is never refused
//     for resources, so it never evicts anything. (The node's pod count is
//     the one limit left: a node at maxPods, 110 by default, counting only
//     pods that have not ended.)
//
//   - Limits stay: the stage-out step's memory limit keeps the pod off
//     BestEffort (the kubelet refuses BestEffort pods under MemoryPressure
//     unless they are critical) and bounds it; defer containers keep the
//     limits the policy gave them. The price of zero requests is CPU weight:
//     under CPU contention a defer pod gets the minimum share (cpu.shares 2)
//     rather than a reserved one, which slows a stage-out (mostly network
//     and disk bound) but never stops it being admitted.
func admissible(pod *corev1.Pod, pol *v1.DeferPolicySpec, opts DeferPodOptions) {
	pod.Spec.PriorityClassName = pol.PriorityClassName
	if pod.Spec.PriorityClassName == "" {
		pod.Spec.PriorityClassName = opts.PriorityClassName
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			cs[i].Resources.Requests = zeroRequests()
		}
	}
}
