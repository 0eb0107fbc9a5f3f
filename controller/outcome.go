package controller

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/podstate"
	"github.com/kdefer/kdefer/stagecontract"
)

// Outcome is what a defer pod's status says about its run.
type Outcome struct {
	// Steps in order, with attempts, last exit code and message.
	Steps []v1.StepStatus
	// Summary is the stage-out step's StageSummary, once it has one.
	Summary *stagecontract.StageSummary
	// Blocked is the first step the kubelet cannot start for want of a
	// Secret or ConfigMap (CreateContainerConfigError); it waits for it.
	Blocked *BlockedStep
	// Done and Failed: the run is over; Reason/Message say why it failed.
	Done, Failed    bool
	Reason, Message string
}

// BlockedStep is a step the kubelet cannot start, with its message.
type BlockedStep struct{ Step, Message string }

// reasonCreateContainerConfigError is the kubelet's waiting reason for a
// container whose Secret or ConfigMap is missing; it retries until it
// exists.
const reasonCreateContainerConfigError = "CreateContainerConfigError"

// Observe reads a defer pod's status. retryLimit is how often a failed step
// is retried; a step that exits with the stage binary's permanent or usage
// code ends the run at once.
func Observe(pod *corev1.Pod, retryLimit int32) Outcome {
	var o Outcome
	statuses := map[string]corev1.ContainerStatus{}
	for _, s := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		statuses[s.Name] = s
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			continue // the stage-logs sidecar: no step, and the phase waits for it
		}
		s, ok := statuses[c.Name]
		step := v1.StepStatus{Name: c.Name}
		if !ok {
			o.Steps = append(o.Steps, step)
			continue
		}
		if w := s.State.Waiting; w != nil && w.Reason == reasonCreateContainerConfigError && o.Blocked == nil {
			o.Blocked = &BlockedStep{Step: c.Name, Message: w.Message}
		}
		term := s.State.Terminated
		if term == nil {
			term = s.LastTerminationState.Terminated
		}
		step.Attempts = s.RestartCount
		if s.State.Running != nil || s.State.Terminated != nil {
			step.Attempts++
		}
		if term != nil {
			code := term.ExitCode
			step.ExitCode = &code
			step.Message = truncate(strings.TrimSpace(term.Message), 512)
			if c.Name == v1.StageOutStepName {
				if sum := parseSummary(term.Message); sum != nil {
					o.Summary = sum
					if sum.Error != "" {
						step.Message = truncate(sum.Error, 512)
					} else {
						step.Message = fmt.Sprintf("%d objects, %d bytes uploaded, %d already there", sum.Objects, sum.Bytes, sum.Skipped)
						if sum.Unsaved > 0 {
							step.Message += fmt.Sprintf(", %d files not saved", sum.Unsaved)
						}
					}
				}
			}
			if code == stagecontract.ExitPermanent || code == stagecontract.ExitUsage {
				o.Done, o.Failed, o.Reason = true, true, v1.ReasonPermanentError
				o.Message = fmt.Sprintf("step %s exited %d (permanent error, not retried): %s", c.Name, code, step.Message)
			} else if code != 0 && s.RestartCount > retryLimit {
				o.Done, o.Failed, o.Reason = true, true, v1.ReasonRetriesExhausted
				o.Message = fmt.Sprintf("step %s failed %d times, last exit %d: %s", c.Name, s.RestartCount, code, step.Message)
			}
		}
		o.Steps = append(o.Steps, step)
	}
	if o.Done {
		return o
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		o.Done = true
	case corev1.PodFailed:
		o.Done, o.Failed = true, true
		o.Reason, o.Message = v1.ReasonDeferPodFailed, "defer pod failed"
		if pod.Status.Reason == podstate.PodReasonDeadlineExceeded {
			o.Reason, o.Message = v1.ReasonDeadlineExceeded, "the defer run's deadline passed: "+pod.Status.Message
		} else if pod.Status.Reason != "" {
			o.Message = fmt.Sprintf("defer pod failed: %s: %s", pod.Status.Reason, pod.Status.Message)
		}
	}
	return o
}

// parseSummary reads the StageSummary a stage step wrote as its termination
// message; nil if the message is none (the step ended before it wrote one).
func parseSummary(msg string) *stagecontract.StageSummary {
	msg = strings.TrimSpace(msg)
	if !strings.HasPrefix(msg, "{") {
		return nil
	}
	var s stagecontract.StageSummary
	if err := json.Unmarshal([]byte(msg), &s); err != nil {
		return nil
	}
	return &s
}
