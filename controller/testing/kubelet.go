package testing

import (
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
)

// The kubelet and the Job controller do not run under envtest; these helpers
// write the pod status they would, in the shapes observed on a real v1.34
// cluster (see docs/design.md, "Triggers").

// Running marks every main container running, phase Running, as the kubelet
// reports a started pod (clienttest.SetRunning writes it).
func Running(pod *corev1.Pod) {
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = nil
	for _, ctr := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image, Ready: true, Started: ptrTrue(),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
}

// Terminate ends every main container now with the exit code and reason and
// sets the phase (empty: leave it), status reason and extra conditions.
func Terminate(pod *corev1.Pod, code int32, reason string, phase corev1.PodPhase, podReason string, conds ...corev1.PodCondition) {
	now := metav1.NewTime(time.Now())
	for i := range pod.Status.ContainerStatuses {
		pod.Status.ContainerStatuses[i].Ready = false
		pod.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, StartedAt: now, FinishedAt: now}}
	}
	if phase != "" {
		pod.Status.Phase = phase
	}
	pod.Status.Reason = podReason
	pod.Status.Conditions = append(pod.Status.Conditions, conds...)
}

// DisruptionTarget is the condition the Eviction API, the scheduler, the
// taint manager, PodGC and the kubelet add.
func DisruptionTarget(reason string) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason,
		LastTransitionTime: metav1.Now()}
}

// FinishDeferPod writes the status of a defer pod whose steps all ran: each
// step exited code (the last attempt), restarts times before; the stage-out
// step's termination message is the summary. code 0 makes the pod
// Succeeded; otherwise the pod stays Pending/Running as under restartPolicy
// OnFailure unless failed is true.
func FinishDeferPod(pod *corev1.Pod, code int32, restarts int32, sum *stagecontract.StageSummary, failed bool) {
	now := metav1.Now()
	msg := ""
	if sum != nil {
		b, _ := json.Marshal(sum)
		msg = string(b)
	}
	st := func(c corev1.Container) corev1.ContainerStatus {
		m := ""
		if c.Name == v1.StageOutStepName {
			m = msg
		}
		return corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, RestartCount: restarts,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: map[bool]string{true: "Completed", false: "Error"}[code == 0], Message: m, StartedAt: now, FinishedAt: now}}}
	}
	pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses = nil, nil
	for _, c := range pod.Spec.InitContainers {
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, st(c))
	}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, st(c))
	}
	switch {
	case code == 0:
		pod.Status.Phase = corev1.PodSucceeded
	case failed:
		pod.Status.Phase = corev1.PodFailed
	default:
		pod.Status.Phase = corev1.PodRunning
	}
}

func ptrTrue() *bool { t := true; return &t }
