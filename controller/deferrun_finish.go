package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// finish marks the run final, stops a defer pod that still runs, and handles
// the volume per policy.
func (r *RunReconciler) finish(ctx context.Context, s *runState, typ, reason, msg string, pod *corev1.Pod) error {
	if pod != nil && !podTerminal(pod) && pod.DeletionTimestamp == nil {
		log.FromContext(ctx).Info("stopping defer pod", "pod", pod.Name, "reason", reason)
		if err := r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("stopping defer pod %s: %w", pod.Name, err)
		}
	}
	s.cond(typ, true, reason, msg)
	if meta.FindStatusCondition(s.status.Conditions, v1.DeferRunStagingOut) != nil {
		s.cond(v1.DeferRunStagingOut, false, reason, "")
	}
	if c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunConfigError); c != nil && c.Status == metav1.ConditionTrue && reason != v1.ReasonConfigError {
		s.cond(v1.DeferRunConfigError, false, v1.ReasonResolved, "")
	}
	s.status.CompletionTime = &metav1.Time{Time: s.now}
	s.finishedNow = true
	evType := corev1.EventTypeNormal
	if typ == v1.DeferRunFailed {
		evType = corev1.EventTypeWarning
	}
	s.events = append(s.events, event{evType, reason, fmt.Sprintf("defer run of pod %s %s: %s", s.run.Spec.PodName, typ, msg), false})
	if err := r.handleVolume(ctx, s); err != nil {
		return err
	}
	return r.deleteEndedPod(ctx, s)
}

// afterFinish: release a retained volume when due, stop a leftover defer
// pod, delete the run after its TTL.
func (r *RunReconciler) afterFinish(ctx context.Context, s *runState) (passEnd, error) {
	if err := r.handleVolume(ctx, s); err != nil {
		return endWrite, err
	}
	if err := r.deleteEndedPod(ctx, s); err != nil {
		return endWrite, err
	}
	if exp, ok := TTLExpiry(s.view()); ok && s.run.DeletionTimestamp == nil {
		if !s.now.Before(exp) {
			return endDelete, nil
		}
		s.requeueAt(exp)
	}
	return endWrite, nil
}

// handleVolume deletes the work PVCs when ShouldRelease says so, else records
// that they are kept and when they are due.
func (r *RunReconciler) handleVolume(ctx context.Context, s *runState) error {
	if meta.IsStatusConditionTrue(s.status.Conditions, v1.DeferRunVolumeReleased) {
		return nil
	}
	view := &v1.DeferRun{ObjectMeta: s.run.ObjectMeta, Spec: s.run.Spec, Status: *s.status}
	release, due := ShouldRelease(view, s.now)
	if !release {
		msg := fmt.Sprintf("work volume kept for inspection or a rerun; release it with `kdefer release deferrun/%s`", s.run.Name)
		if !due.IsZero() {
			msg += fmt.Sprintf(" (released automatically at %s)", due.UTC().Format(time.RFC3339))
			s.requeueAt(due)
		}
		s.cond(v1.DeferRunVolumeReleased, false, v1.ReasonRetained, msg)
		return r.recordRetainedBytes(ctx, s)
	}
	for _, v := range s.run.Spec.Volumes {
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.client.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: v.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading work PVC %s: %w", v.ClaimName, err)
		}
		if !HasOwner(pvc.OwnerReferences, s.run) && !ownedBy(pvc.OwnerReferences, s.run.Spec.PodUID) {
			continue // someone else's PVC of that name
		}
		if pvc.DeletionTimestamp != nil {
			continue
		}
		log.FromContext(ctx).Info("releasing work volume", "pvc", pvc.Name)
		// Foreground: the garbage collector deletes the defer pod, which
		// the PVC owns (OwnByVolumes), so nothing holds the PVC after it.
		if err := r.client.Delete(ctx, pvc, client.Preconditions{UID: &pvc.UID}, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("releasing work PVC %s: %w", pvc.Name, err)
		}
		r.exp.claims.forget(client.ObjectKeyFromObject(pvc))
		Metrics.Writes.WithLabelValues("release-volume").Inc()
	}
	s.status.RetainedBytes = 0
	s.cond(v1.DeferRunVolumeReleased, true, v1.ReasonReleased, "work volume deleted")
	s.events = append(s.events, event{corev1.EventTypeNormal, v1.EventVolumeReleased, "work volume deleted", true})
	return nil
}

// recordRetainedBytes records the disk the run's kept volumes hold, once:
// the cache keeps no PVC sizes (stripPVC), so they are read from the API
// server, and only for the few runs that keep their volumes. A PVC not yet
// read (gone, or the read failed) is tried again at the run's next pass.
func (r *RunReconciler) recordRetainedBytes(ctx context.Context, s *runState) error {
	if s.status.RetainedBytes != 0 {
		return nil
	}
	var sum int64
	for _, v := range s.run.Spec.Volumes {
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: v.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading the size of kept work PVC %s: %w", v.ClaimName, err)
		}
		sum += claimBytes(pvc)
	}
	s.status.RetainedBytes = sum
	return nil
}

// claimBytes is a PVC's capacity, else its requested storage.
func claimBytes(pvc *corev1.PersistentVolumeClaim) int64 {
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		return q.Value()
	}
	if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		return q.Value()
	}
	return 0
}

// deleteLeftoverDeferPod deletes the defer pod of a run that goes, if its
// volumes did not take it with them (their release is normally a foreground
// deletion that does; a PVC deleted by someone else in the background waits
// for the pod instead). A pod owned by the run goes with the run.
func (r *RunReconciler) deleteLeftoverDeferPod(ctx context.Context, run *v1.DeferRun) error {
	pod := r.deferPod(ctx, run)
	if pod == nil || pod.DeletionTimestamp != nil || metav1.IsControlledBy(pod, run) {
		return nil
	}
	log.FromContext(ctx).Info("deleting defer pod of a deleted run", "pod", pod.Name)
	return client.IgnoreNotFound(r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}))
}

func (r *RunReconciler) removeFinalizer(ctx context.Context, run *v1.DeferRun) error {
	if !controllerutil.ContainsFinalizer(run, v1.DeferRunFinalizer) {
		return nil
	}
	log.FromContext(ctx).Info("removing defer run finalizer")
	r.exp.runs.forget(client.ObjectKeyFromObject(run))
	if err := patch(ctx, r.client, run, func(run *v1.DeferRun) { controllerutil.RemoveFinalizer(run, v1.DeferRunFinalizer) }); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing the run's finalizer: %w", err)
	}
	return nil
}
