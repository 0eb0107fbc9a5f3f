package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// maxAttemptHistory bounds status.retries.history (the CRD's MaxItems).
const maxAttemptHistory = 10

// ResumeDecision is what ResumeOf decides about a run.
type ResumeDecision struct {
	// Cause is why the run is resumed now (v1.ReasonRetryRequested or
	// v1.ReasonNodeReturned); "" when it is not.
	Cause string
	// Refused is why a pending retry request is not granted; "" when there
	// is none or it is granted. A refused request is consumed.
	Refused string
	// Request is the pending kdefer.io/retry value ("" if none): the one
	// the decision handles.
	Request string
}

// ResumeOf decides whether a run is resumed: Failed stays final unless a
// retry is asked for (a kdefer.io/retry value not handled yet) or, after
// NodeLost, the node is Ready again (nodeReady). Either needs the work
// volume kept: a released volume has nothing left to stage out. A retry
// asked of a run that has not failed, or whose volume is gone, is refused
// (and consumed, so it never fires later, when the run fails).
func ResumeOf(run *v1.DeferRun, nodeReady bool) ResumeDecision {
	var d ResumeDecision
	if req := run.Annotations[v1.AnnotationRetry]; req != "" && (run.Status.Retries == nil || run.Status.Retries.HandledRequest != req) {
		d.Request = req
	}
	failed := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
	isFailed := failed != nil && failed.Status == metav1.ConditionTrue
	released := meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunVolumeReleased) ||
		run.Annotations[v1.AnnotationRelease] == "true" || run.DeletionTimestamp != nil
	switch {
	case d.Request != "" && !isFailed:
		state := v1.StateOf(&run.Status)
		if state == "" {
			state = v1.DeferRunArmed
		}
		d.Refused = fmt.Sprintf("the run is %s, not Failed: only a failed run is retried", state)
	case d.Request != "" && released:
		d.Refused = "the run's work volume is released (or being released): there is nothing left to stage out"
	case d.Request != "":
		d.Cause = v1.ReasonRetryRequested
	case isFailed && failed.Reason == v1.ReasonNodeLost && !released && nodeReady:
		d.Cause = v1.ReasonNodeReturned
	}
	return d
}

// resume resumes a failed run when ResumeOf says so, or consumes a retry
// request it refuses (with a Warning event). It reports whether the run was
// resumed: the pass then ends with the status write, and the next one
// starts the new attempt's defer pod.
func (r *RunReconciler) resume(ctx context.Context, s *runState) (bool, error) {
	run := s.run
	nodeReady := false
	if c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunFailed); c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1.ReasonNodeLost && run.Status.NodeName != "" {
		n := &corev1.Node{}
		if err := r.client.Get(ctx, types.NamespacedName{Name: run.Status.NodeName}, n); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("reading node %s: %w", run.Status.NodeName, err)
		} else if err == nil {
			nodeReady = NodeReady(n)
		}
	}
	d := ResumeOf(s.view(), nodeReady)
	if d.Refused != "" {
		rt := retriesOf(s.status)
		rt.HandledRequest = truncate(d.Request, 256)
		s.status.Retries = rt
		s.events = append(s.events, event{corev1.EventTypeWarning, v1.EventRetryRefused, "retry not granted: " + d.Refused, true})
		return false, nil
	}
	if d.Cause == "" {
		return false, nil
	}
	if d.Cause == v1.ReasonNodeReturned {
		// The node is back; its volume must be too (a node that returns
		// wiped, or a PVC deleted meanwhile, leaves nothing to resume).
		missing, err := r.volumesMissing(ctx, run)
		if err != nil || missing {
			return false, err
		}
	}
	failed := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunFailed).DeepCopy()
	ResumeStatus(s.status, d, s.now)
	msg := fmt.Sprintf("resumed after %s (attempt %d): a new defer pod runs the steps that have not succeeded (%s), with a fresh deadline",
		failed.Reason, s.status.Retries.Count+1, stepNames(Steps(s.view(), r.opts)))
	if d.Cause == v1.ReasonNodeReturned {
		msg = fmt.Sprintf("node %s is Ready again and the work volume is still there: %s", run.Status.NodeName, msg)
	}
	s.cond(v1.DeferRunFailed, false, d.Cause, msg)
	log.FromContext(ctx).Info("resuming failed defer run", "cause", d.Cause, "failedReason", failed.Reason, "attempt", s.status.Retries.Count+1)
	s.events = append(s.events, event{corev1.EventTypeNormal, d.Cause, fmt.Sprintf("defer run of pod %s %s", run.Spec.PodName, msg), false})
	Metrics.Resumes.WithLabelValues(d.Cause).Inc()
	s.requeueAt(s.now) // the next pass, a second from now, starts the defer pod
	return true, nil
}

// ResumeStatus turns a failed run's status into a new attempt's: the
// failed attempt goes into status.retries.history, the count goes up and
// the deadline counts from now; what the next defer pod reports (start,
// refusals, completion) starts over. The steps are kept: those that
// succeeded are not run again (Steps). The caller sets the Failed
// condition False.
func ResumeStatus(st *v1.DeferRunStatus, d ResumeDecision, now time.Time) {
	rt := retriesOf(st)
	at := v1.DeferRunAttempt{Reason: v1.ReasonDeferPodFailed, ResumedBy: d.Cause}
	if c := meta.FindStatusCondition(st.Conditions, v1.DeferRunFailed); c != nil {
		at.Reason, at.Message, at.FailedAt = c.Reason, truncate(c.Message, 512), c.LastTransitionTime.DeepCopy()
	}
	if st.Refusals != nil {
		at.Refusals = st.Refusals.Count
	}
	rt.History = append(rt.History, at)
	if n := len(rt.History); n > maxAttemptHistory {
		rt.History = rt.History[n-maxAttemptHistory:]
	}
	rt.Count++
	if d.Request != "" {
		rt.HandledRequest = truncate(d.Request, 256)
	}
	rt.LastTime = &metav1.Time{Time: now}
	st.Retries = rt
	st.CompletionTime, st.StartTime, st.DeferPodName, st.Refusals = nil, nil, "", nil
}

func retriesOf(st *v1.DeferRunStatus) *v1.DeferRunRetries {
	if st.Retries != nil {
		return st.Retries.DeepCopy()
	}
	return &v1.DeferRunRetries{}
}

// attemptStart is when the run's current attempt began, the base of its
// deadline: when the pod was seen ended, or when a failed run was resumed.
func attemptStart(st *v1.DeferRunStatus) time.Time {
	if st.Retries != nil && st.Retries.LastTime != nil {
		return st.Retries.LastTime.Time
	}
	if st.TriggeredAt == nil {
		return time.Time{}
	}
	return st.TriggeredAt.Time
}

// attemptOf is the attempt number a defer pod of the run's current attempt
// carries in AnnotationAttempt ("" for the first, which carries none).
func attemptOf(st *v1.DeferRunStatus) string {
	if st.Retries == nil || st.Retries.Count == 0 {
		return ""
	}
	return strconv.Itoa(int(st.Retries.Count))
}

// staleDeferPod deletes a defer pod left by an earlier attempt of a resumed
// run (its fixed name is the new one's) and waits for it to go; the new
// attempt's pod is created by a later pass.
func (r *RunReconciler) staleDeferPod(ctx context.Context, s *runState, pod *corev1.Pod) error {
	if pod.DeletionTimestamp == nil {
		log.FromContext(ctx).Info("deleting the defer pod of an earlier attempt", "pod", pod.Name, "attempt", pod.Annotations[v1.AnnotationAttempt])
		if err := r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting defer pod %s of an earlier attempt: %w", pod.Name, err)
		}
	}
	s.requeueAt(s.now.Add(time.Second))
	return nil
}

// pendingSteps leaves out of a resumed run's steps those that succeeded in
// an earlier attempt (exit code 0 in status.steps): a retry runs from the
// first step that failed or never ran. A first attempt runs every step.
func pendingSteps(steps []Step, st *v1.DeferRunStatus) []Step {
	if st.Retries == nil || st.Retries.Count == 0 {
		return steps
	}
	done := map[string]bool{}
	for _, ss := range st.Steps {
		done[ss.Name] = ss.ExitCode != nil && *ss.ExitCode == 0
	}
	out := steps[:0:0]
	for _, s := range steps {
		if !done[s.Name] {
			out = append(out, s)
		}
	}
	return out
}

// mergeSteps lays the steps a resumed run's defer pod reports over those of
// the earlier attempts, so that a step that succeeded before (and is not
// run again) keeps its record.
func mergeSteps(old, cur []v1.StepStatus) []v1.StepStatus {
	byName := map[string]v1.StepStatus{}
	for _, c := range cur {
		byName[c.Name] = c
	}
	out := make([]v1.StepStatus, 0, len(old)+len(cur))
	seen := map[string]bool{}
	for _, o := range old {
		if c, ok := byName[o.Name]; ok {
			o = c
		}
		out = append(out, o)
		seen[o.Name] = true
	}
	for _, c := range cur {
		if !seen[c.Name] {
			out = append(out, c)
		}
	}
	return out
}

// stepNames lists the names of steps, for messages.
func stepNames(steps []Step) string {
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}
