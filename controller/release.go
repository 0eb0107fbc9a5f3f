package controller

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// ShouldRelease says whether a finished run's work volume is deleted now, and
// otherwise when a retained one is due (zero: kept until released by hand).
// Succeeded and skipped runs release at once (the pod is terminal, nothing
// uses the volume, and its disk is freed now rather than when the Job is
// cleaned up); failed runs, and succeeded runs that are Incomplete (files
// the stage-out could not store are still on the volume only), follow
// policy.onFailure (default Retain); a run annotated kdefer.io/release (by
// `kdefer release`) or being deleted releases.
func ShouldRelease(run *v1.DeferRun, now time.Time) (bool, time.Time) {
	if run.Annotations[v1.AnnotationRelease] == "true" || run.DeletionTimestamp != nil {
		return true, time.Time{}
	}
	failed := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
	if failed == nil || failed.Status != "True" {
		failed = meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunIncomplete)
	}
	if failed == nil || failed.Status != "True" {
		return true, time.Time{}
	}
	of := run.Spec.Policy.OnFailure
	if of != nil && of.Volume == v1.VolumeRelease {
		return true, time.Time{}
	}
	if of != nil && of.RetainFor != nil {
		due := failed.LastTransitionTime.Add(of.RetainFor.Duration)
		return !now.Before(due), due
	}
	return false, time.Time{}
}

// TTLExpiry is when a finished run whose volume is handled is deleted:
// policy.ttlSecondsAfterFinished after it finished or its volume was
// released, whichever is later. ok is false while the volume is retained
// (the run is the handle to release it).
func TTLExpiry(run *v1.DeferRun) (time.Time, bool) {
	if !v1.Finished(run) || run.Status.CompletionTime == nil {
		return time.Time{}, false
	}
	rel := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased)
	if rel == nil || rel.Status != "True" {
		return time.Time{}, false
	}
	base := run.Status.CompletionTime.Time
	if rel.LastTransitionTime.After(base) {
		base = rel.LastTransitionTime.Time
	}
	ttl := v1.DefaultTTLSecondsAfterFinished
	if p := run.Spec.Policy.TTLSecondsAfterFinished; p != nil {
		ttl = *p
	}
	return base.Add(time.Duration(ttl) * time.Second), true
}
