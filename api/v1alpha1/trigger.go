package v1alpha1

// Trigger says why a managed pod's main containers ended. Every defer step
// receives it in KDEFER_TRIGGER.
// +kubebuilder:validation:Enum=Succeeded;Failed;OOMKilled;Evicted;Drained;Preempted;DeadlineExceeded;Deleted;Suspended;NodeShutdown;TaintEviction;PodGC;NodeLost
type Trigger string

const (
	// TriggerSucceeded means every main container exited 0.
	TriggerSucceeded Trigger = "Succeeded"
	// TriggerFailed means a main container exited non-zero for no reason below.
	TriggerFailed Trigger = "Failed"
	// TriggerOOMKilled means a main container was terminated with reason
	// OOMKilled (whatever its exit code: a killed child can leave exit 0).
	TriggerOOMKilled Trigger = "OOMKilled"
	// TriggerEvicted means the kubelet evicted the pod for node pressure or an
	// exceeded ephemeral-storage limit (status.reason=Evicted).
	TriggerEvicted Trigger = "Evicted"
	// TriggerDrained means the pod was evicted through the Eviction API
	// (kubectl drain), DisruptionTarget reason EvictionByEvictionAPI.
	TriggerDrained Trigger = "Drained"
	// TriggerPreempted means the scheduler preempted the pod
	// (PreemptionByScheduler).
	TriggerPreempted Trigger = "Preempted"
	// TriggerDeadlineExceeded means the Job's or pod's activeDeadlineSeconds
	// passed.
	TriggerDeadlineExceeded Trigger = "DeadlineExceeded"
	// TriggerDeleted means the pod was deleted by a user or a controller.
	TriggerDeleted Trigger = "Deleted"
	// TriggerSuspended means the Job controller deleted the pod because its
	// Job was suspended (spec.suspend): a queue such as Kueue preempted or
	// evicted the workload, or a user suspended the Job.
	TriggerSuspended Trigger = "Suspended"
	// TriggerNodeShutdown means a graceful node shutdown ended the pod
	// (TerminationByKubelet with a shutdown message, or
	// status.reason=Terminated/Shutdown).
	TriggerNodeShutdown Trigger = "NodeShutdown"
	// TriggerTaintEviction means the taint manager removed the pod
	// (DeletionByTaintManager).
	TriggerTaintEviction Trigger = "TaintEviction"
	// TriggerPodGC means the pod garbage collector removed the pod
	// (DeletionByPodGC), e.g. its node is gone.
	TriggerPodGC Trigger = "PodGC"
	// TriggerNodeLost means the pod's node stopped reporting before the pod
	// ended.
	TriggerNodeLost Trigger = "NodeLost"
)

// AllTriggers lists every trigger, in documentation order.
var AllTriggers = []Trigger{
	TriggerSucceeded, TriggerFailed, TriggerOOMKilled, TriggerEvicted, TriggerDrained,
	TriggerPreempted, TriggerDeadlineExceeded, TriggerDeleted, TriggerSuspended, TriggerNodeShutdown,
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
