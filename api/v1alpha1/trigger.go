package v1alpha1

// Trigger says why a managed pod's main containers ended. Every defer step
// receives it in KDEFER_TRIGGER.
// +kubebuilder:validation:Enum=Succeeded;Failed;OOMKilled;Evicted;Drained;Preempted;DeadlineExceeded;Deleted;NodeShutdown;TaintEviction;PodGC;NodeLost
type Trigger string

const (
	// TriggerSucceeded: every main container exited 0.
	TriggerSucceeded Trigger = "Succeeded"
	// TriggerFailed: a main container exited non-zero for no reason below.
	TriggerFailed Trigger = "Failed"
	// TriggerOOMKilled: a main container was terminated with reason OOMKilled
	// (whatever its exit code: a killed child can leave exit 0).
	TriggerOOMKilled Trigger = "OOMKilled"
	// TriggerEvicted: the kubelet evicted the pod for node pressure or an
	// exceeded ephemeral-storage limit (status.reason=Evicted).
	TriggerEvicted Trigger = "Evicted"
	// TriggerDrained: evicted through the Eviction API (kubectl drain),
	// DisruptionTarget reason EvictionByEvictionAPI.
	TriggerDrained Trigger = "Drained"
	// TriggerPreempted: preempted by the scheduler (PreemptionByScheduler).
	TriggerPreempted Trigger = "Preempted"
	// TriggerDeadlineExceeded: the Job's or pod's activeDeadlineSeconds passed.
	TriggerDeadlineExceeded Trigger = "DeadlineExceeded"
	// TriggerDeleted: the pod was deleted by a user or a controller.
	TriggerDeleted Trigger = "Deleted"
	// TriggerNodeShutdown: graceful node shutdown (TerminationByKubelet with a
	// shutdown message, or status.reason=Terminated/Shutdown).
	TriggerNodeShutdown Trigger = "NodeShutdown"
	// TriggerTaintEviction: removed by the taint manager (DeletionByTaintManager).
	TriggerTaintEviction Trigger = "TaintEviction"
	// TriggerPodGC: removed by the pod garbage collector (DeletionByPodGC),
	// e.g. its node is gone.
	TriggerPodGC Trigger = "PodGC"
	// TriggerNodeLost: the pod's node stopped reporting before the pod ended.
	TriggerNodeLost Trigger = "NodeLost"
)

// AllTriggers lists every trigger, in documentation order.
var AllTriggers = []Trigger{
	TriggerSucceeded, TriggerFailed, TriggerOOMKilled, TriggerEvicted, TriggerDrained,
	TriggerPreempted, TriggerDeadlineExceeded, TriggerDeleted, TriggerNodeShutdown,
	TriggerTaintEviction, TriggerPodGC, TriggerNodeLost,
}

// IsValid reports whether t is one of AllTriggers.
func (t Trigger) IsValid() bool {
	for _, k := range AllTriggers {
		if k == t {
			return true
		}
	}
	return false
}
