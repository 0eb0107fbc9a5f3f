package podstate

import (
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// Classification says whether a managed pod's main containers have ended and
// why. It is computed from the API alone (see docs/design.md, "Triggers").
type Classification struct {
	// Done is true once the pod is terminal, or deleting with every regular
	// container terminated.
	Done bool
	// Trigger says why; set when Done.
	Trigger v1.Trigger
	// Skip is true for a forced deletion (grace period 0 while containers
	// still ran): the user asked for the pod to vanish at once, so no step
	// runs and the volume is released.
	Skip bool
	// ExitCodes of the regular containers that terminated.
	ExitCodes []v1.ContainerExit
}

// Pod status reasons set by the kubelet.
const (
	PodReasonEvicted          = "Evicted"
	PodReasonDeadlineExceeded = "DeadlineExceeded"
	PodReasonTerminated       = "Terminated" // graceful node shutdown
	PodReasonShutdown         = "Shutdown"
)

// DisruptionTarget reasons (k8s.io/api/core/v1 since 1.26).
var disruptionTriggers = map[string]v1.Trigger{
	"EvictionByEvictionAPI":  v1.TriggerDrained,
	"PreemptionByScheduler":  v1.TriggerPreempted,
	"DeletionByTaintManager": v1.TriggerTaintEviction,
	"DeletionByPodGC":        v1.TriggerPodGC,
	// TerminationByKubelet covers node-pressure eviction and graceful node
	// shutdown; the message tells them apart.
	"TerminationByKubelet": v1.TriggerEvicted,
}

// Classify decides whether pod has ended and with which trigger. job is the
// pod's Job, if known (it tells a Job's DeadlineExceeded apart from a plain
// deletion). Precedence, first match wins:
//
//  1. not terminal and not (deleting with all regular containers terminated): not done
//  2. deleted with grace 0 before its containers ended: Deleted, Skip
//  3. phase Succeeded without an OOM kill: Succeeded
//  4. status.reason Evicted: Evicted
//  5. condition DisruptionTarget=True: Drained, Preempted, TaintEviction, PodGC, Evicted or NodeShutdown
//  6. status.reason DeadlineExceeded, or the Job failed with DeadlineExceeded: DeadlineExceeded
//  7. status.reason Terminated/Shutdown: NodeShutdown
//  8. a regular container terminated with reason OOMKilled (any exit code): OOMKilled
//  9. deletion requested before the containers ended (same second included),
//     or, once the kubelet's final delete has overwritten that time, a main
//     container killed by the kubelet's signal (exit 143, or 137): Suspended
//     when the pod's Job was suspended then (the Job controller deletes a
//     suspended Job's pods: Kueue's preemption and eviction), else Deleted
//  10. phase Failed and a regular container with a memory limit was
//     SIGKILLed (exit 137, reason Error) with no deletion, eviction or
//     deadline recorded: OOMKilled (containerd on cgroup v1 sometimes
//     reports the OOM kill as a plain exit 137; nothing else in the API
//     kills a container with SIGKILL alone)
//  11. otherwise: Failed
func Classify(pod *corev1.Pod, job *batchv1.Job) Classification {
	var c Classification
	terminated, lastFinish := regularContainersTerminated(pod)
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	deleting := pod.DeletionTimestamp != nil
	c.ExitCodes = ExitCodes(pod)
	if deleting && !terminal && !terminated {
		if pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0 {
			// A forced deletion; a grace-0 delete that comes after the
			// containers ended is the kubelet's final delete, not this.
			return Classification{Done: true, Trigger: v1.TriggerDeleted, Skip: true, ExitCodes: c.ExitCodes}
		}
		if pod.Spec.NodeName == "" {
			// Never scheduled: nothing ran, nothing to stage out.
			return Classification{Done: true, Trigger: v1.TriggerDeleted, Skip: true}
		}
	}
	if ended := terminal || (deleting && terminated); !ended {
		return Classification{}
	}
	c.Done = true
	oom := false
	for _, e := range c.ExitCodes {
		oom = oom || e.Reason == "OOMKilled"
	}
	switch {
	case pod.Status.Phase == corev1.PodSucceeded && !oom:
		c.Trigger = v1.TriggerSucceeded
	case pod.Status.Reason == PodReasonEvicted:
		c.Trigger = v1.TriggerEvicted
	case disruption(pod) != "":
		c.Trigger = disruption(pod)
	case pod.Status.Reason == PodReasonDeadlineExceeded || jobDeadlineExceeded(job):
		c.Trigger = v1.TriggerDeadlineExceeded
	case pod.Status.Reason == PodReasonTerminated || pod.Status.Reason == PodReasonShutdown:
		c.Trigger = v1.TriggerNodeShutdown
	case oom:
		c.Trigger = v1.TriggerOOMKilled
	case deleting && !deletionRequested(pod).After(lastFinish),
		deleting && finalDeleteAfterSignal(pod, c.ExitCodes):
		c.Trigger = v1.TriggerDeleted
		if jobSuspendedAt(job, deletionRequested(pod)) {
			c.Trigger = v1.TriggerSuspended
		}
	case pod.Status.Phase == corev1.PodSucceeded:
		c.Trigger = v1.TriggerSucceeded
	case pod.Status.Phase == corev1.PodFailed && killedAtMemoryLimit(pod):
		c.Trigger = v1.TriggerOOMKilled
	default:
		c.Trigger = v1.TriggerFailed
	}
	return c
}

// IsNativeSidecar reports whether an init container is a native sidecar.
func IsNativeSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// regularContainersTerminated reports whether every regular (main) container
// has a terminated state, and the latest finish time among them. Native
// sidecars are init containers and do not count.
func regularContainersTerminated(pod *corev1.Pod) (bool, time.Time) {
	var last time.Time
	if len(pod.Status.ContainerStatuses) < len(pod.Spec.Containers) {
		return false, last
	}
	byName := map[string]*corev1.ContainerStatus{}
	for i := range pod.Status.ContainerStatuses {
		byName[pod.Status.ContainerStatuses[i].Name] = &pod.Status.ContainerStatuses[i]
	}
	for _, ctr := range pod.Spec.Containers {
		s := byName[ctr.Name]
		if s == nil || s.State.Terminated == nil {
			return false, last
		}
		if f := s.State.Terminated.FinishedAt.Time; f.After(last) {
			last = f
		}
	}
	return true, last
}

// ExitCodes lists how each regular container that terminated ended.
func ExitCodes(pod *corev1.Pod) []v1.ContainerExit {
	var out []v1.ContainerExit
	for _, s := range pod.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil {
			out = append(out, v1.ContainerExit{Name: s.Name, ExitCode: t.ExitCode, Reason: t.Reason})
		}
	}
	return out
}

func disruption(pod *corev1.Pod) v1.Trigger {
	for _, cond := range pod.Status.Conditions {
		if cond.Type != corev1.DisruptionTarget || cond.Status != corev1.ConditionTrue {
			continue
		}
		t, ok := disruptionTriggers[cond.Reason]
		if !ok {
			return ""
		}
		if cond.Reason == "TerminationByKubelet" && strings.Contains(strings.ToLower(cond.Message), "shutdown") {
			return v1.TriggerNodeShutdown
		}
		return t
	}
	return ""
}

func jobDeadlineExceeded(job *batchv1.Job) bool {
	if job == nil {
		return false
	}
	for _, cond := range job.Status.Conditions {
		if (cond.Type == batchv1.JobFailed || cond.Type == batchv1.JobFailureTarget) &&
			cond.Status == corev1.ConditionTrue && cond.Reason == batchv1.JobReasonDeadlineExceeded {
			return true
		}
	}
	return false
}

// jobSuspendedAt reports whether job was suspended when the deletion of
// its pod was requested at t: the Job asks for it (spec.suspend), the Job
// controller says so (condition Suspended=True), or it resumed the Job no
// earlier than t (a queue readmitted it while the pod's grace period ran).
// Kueue stops a batch/v1 Job this way, for a preemption as for any other
// eviction, and the Job controller's deletion leaves no DisruptionTarget on
// the pod: the Job is the only evidence.
func jobSuspendedAt(job *batchv1.Job, t time.Time) bool {
	if job == nil {
		return false
	}
	if job.Spec.Suspend != nil && *job.Spec.Suspend {
		return true
	}
	for _, cond := range job.Status.Conditions {
		if cond.Type == batchv1.JobSuspended {
			return cond.Status == corev1.ConditionTrue || !cond.LastTransitionTime.Time.Before(t)
		}
	}
	return false
}

// finalDeleteAfterSignal reports a pod whose deletion time was overwritten
// by the kubelet's final grace-0 delete (the apiserver keeps the earlier of
// the two deadlines, and the final delete comes after the containers ended)
// and whose main container died of the kubelet's SIGTERM (exit 143) or its
// SIGKILL at the end of the grace period (137, reason not OOMKilled). The
// original request time is lost, so the signal is the evidence: seen on a
// real cluster when a Job was deleted while kdefer was down.
func finalDeleteAfterSignal(pod *corev1.Pod, exits []v1.ContainerExit) bool {
	if g := pod.DeletionGracePeriodSeconds; g == nil || *g != 0 {
		return false
	}
	for _, e := range exits {
		if e.ExitCode == 143 || (e.ExitCode == 137 && e.Reason != "OOMKilled") {
			return true
		}
	}
	return false
}

// killedAtMemoryLimit reports a regular container that has a memory limit
// and ended with SIGKILL (exit 137) and reason Error: the kernel's OOM killer
// when the runtime missed the OOM event (seen once in six runs of the e2e
// OOM scenario on containerd 1.6 with cgroup v1). Callers rule out the
// kubelet's and the API's kills first.
func killedAtMemoryLimit(pod *corev1.Pod) bool {
	limited := map[string]bool{}
	for _, ctr := range pod.Spec.Containers {
		if _, ok := ctr.Resources.Limits[corev1.ResourceMemory]; ok {
			limited[ctr.Name] = true
		}
	}
	for _, s := range pod.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil && limited[s.Name] && t.ExitCode == 137 && t.Reason == "Error" {
			return true
		}
	}
	return false
}

// deletionRequested is when the deletion was asked for: deletionTimestamp
// minus the grace period.
func deletionRequested(pod *corev1.Pod) time.Time {
	t := pod.DeletionTimestamp.Time
	if g := pod.DeletionGracePeriodSeconds; g != nil {
		t = t.Add(-time.Duration(*g) * time.Second)
	}
	return t
}
