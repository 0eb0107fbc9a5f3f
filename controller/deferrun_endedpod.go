package controller

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// DeletesEndedPod says whether the policy has kdefer delete run's ended pod
// (policy deleteEndedPod): only once the run succeeded without unsaved
// files and its work volume was released, so nothing on the volume is lost
// and nobody needs the pod for a rerun.
func DeletesEndedPod(run *v1.DeferRun) bool {
	st := run.Status.Conditions
	if run.DeletionTimestamp != nil || !meta.IsStatusConditionTrue(st, v1.DeferRunSucceeded) ||
		meta.IsStatusConditionTrue(st, v1.DeferRunIncomplete) || !meta.IsStatusConditionTrue(st, v1.DeferRunVolumeReleased) {
		return false
	}
	switch run.Spec.Policy.DeleteEndedPod {
	case v1.PodDeletionAlways:
		return true
	case v1.PodDeletionNever:
		return false
	}
	return run.Status.Trigger == v1.TriggerEvicted
}

// deleteEndedPod deletes the run's ended pod when DeletesEndedPod says so.
// The released work PVC stays Terminating while any pod that mounts it
// exists (kubernetes.io/pvc-protection), and a Job keeps its ended pods
// until it is cleaned up: 40 pods evicted in a burst left 40 PVCs
// Terminating, their data still on the disk the node was evicting pods to
// free. The Job controller counts a pod before it drops its tracking
// finalizer, so a pod without it can go without changing the Job's
// succeeded and failed counts; one that still has it waits.
func (r *RunReconciler) deleteEndedPod(ctx context.Context, s *runState) error {
	if !DeletesEndedPod(s.view()) {
		return nil
	}
	pod := &corev1.Pod{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: s.run.Spec.PodName}, pod)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading ended pod %s: %w", s.run.Spec.PodName, err)
	}
	if pod.UID != s.run.Spec.PodUID || pod.DeletionTimestamp != nil || !podTerminal(pod) {
		return nil
	}
	if controllerutil.ContainsFinalizer(pod, batchv1.JobTrackingFinalizer) {
		s.requeueAt(s.now.Add(2 * time.Second)) // not counted by the Job controller yet
		return nil
	}
	log.FromContext(ctx).Info("deleting ended pod so its work volume goes", "pod", pod.Name, "trigger", s.status.Trigger)
	if err := r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting ended pod %s: %w", pod.Name, err)
	}
	Metrics.Writes.WithLabelValues("delete-ended-pod").Inc()
	s.events = append(s.events, event{corev1.EventTypeNormal, v1.EventEndedPodDeleted,
		fmt.Sprintf("pod %s deleted after its stage-out (trigger %s), so its work volume and disk are freed now", pod.Name, s.status.Trigger), true})
	return nil
}
