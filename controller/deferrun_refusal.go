package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// refused handles a defer pod its node refused or evicted (Refusal): the
// pod is deleted so that one of the same name can be created, the refusal is
// counted in status.refusals with an event, and the run waits out the
// backoff (checkRefusals) instead of failing. The count is taken only by the
// pass whose delete removed the pod: a later pass that still finds it in the
// cache gets NotFound and counts nothing twice.
func (r *RunReconciler) refused(ctx context.Context, s *runState, pod *corev1.Pod, reason, msg string) (passEnd, error) {
	err := r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if client.IgnoreNotFound(err) != nil {
		return endWrite, fmt.Errorf("deleting refused defer pod %s: %w", pod.Name, err)
	}
	if err == nil {
		rf := &v1.DeferPodRefusals{}
		if s.status.Refusals != nil {
			rf = s.status.Refusals.DeepCopy()
		}
		rf.Count++
		rf.LastReason, rf.LastMessage, rf.LastTime = truncate(reason, 256), truncate(msg, 512), metav1.Time{Time: s.now}
		s.status.Refusals = rf
		Metrics.Refusals.WithLabelValues(refusalLabel(reason)).Inc()
		log.FromContext(ctx).Info("defer pod refused by its node", "pod", pod.Name, "node", pod.Spec.NodeName, "reason", reason, "refusals", rf.Count)
		s.events = append(s.events, event{corev1.EventTypeWarning, v1.ReasonDeferPodRefused, fmt.Sprintf(
			"defer pod %s refused by node %s (%d so far): %s: %s; created again in %s",
			pod.Name, pod.Spec.NodeName, rf.Count, reason, msg, refusalBackoff(rf.Count)), false})
	}
	_, err = r.checkRefusals(ctx, s)
	return endWrite, err
}

// checkRefusals holds back the next defer pod of a run whose last one was
// refused until the backoff has passed, and fails the run (volume kept per
// policy) once its deadline passes first.
func (r *RunReconciler) checkRefusals(ctx context.Context, s *runState) (checked, error) {
	rf := s.status.Refusals
	if rf == nil {
		return proceed, nil
	}
	deadline := attemptStart(s.status).Add(runDeadline(s.view(), r.opts))
	if !s.now.Before(deadline) {
		return decided, r.finish(ctx, s, v1.DeferRunFailed, v1.ReasonDeferPodRefused, fmt.Sprintf(
			"the run's deadline passed while its node refused its defer pod (%d times, last: %s: %s); the work volume is kept per policy",
			rf.Count, rf.LastReason, rf.LastMessage), nil)
	}
	next := rf.LastTime.Add(refusalBackoff(rf.Count))
	if !s.now.Before(next) {
		return proceed, nil
	}
	s.cond(v1.DeferRunStagingOut, false, v1.ReasonDeferPodRefused, fmt.Sprintf(
		"defer pod refused %d times (last: %s); created again at %s", rf.Count, rf.LastReason, next.UTC().Format(time.RFC3339)))
	if deadline.Before(next) {
		next = deadline
	}
	s.requeueAt(next)
	return decided, nil
}

// remainingDeadline is what is left of the run's deadline for a defer pod
// created now, at least a second: a defer pod created again after a refusal
// gets no more than its attempt has left.
func remainingDeadline(s *runState, opts DeferPodOptions) int64 {
	left := attemptStart(s.status).Add(runDeadline(s.view(), opts)).Sub(s.now)
	return max(int64((left+time.Second-1)/time.Second), 1)
}
