package controller

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// Annotations the controller keeps on DeferRuns for itself.
const (
	// annotationConfigError holds why the policy could not be resolved when
	// the run was armed; the run re-resolves it before it starts and
	// proceeds once the cause is fixed.
	annotationConfigError = "kdefer.io/config-error"
	// annotationCachedWorkVolumes exists only in the controller's cache: the
	// pod transform replaces spec.volumes by the names of the work volumes.
	annotationCachedWorkVolumes = "kdefer.io/cached-work-volumes"
	// labelJobUID tells runs of a re-created Job of the same name apart.
	labelJobUID = "kdefer.io/job-uid"
	// AnnotationRelease ("true") on a DeferRun releases its volume by hand
	// (`kdefer release`); an unfinished run stops first.
	AnnotationRelease = "kdefer.io/release"
)

// Condition reasons.
const (
	ReasonArmed            = "Armed"
	ReasonTriggered        = "Triggered"
	ReasonStagingOut       = "StagingOut"
	ReasonSucceeded        = "Succeeded"
	ReasonSkipped          = "SkipRequested"
	ReasonRuleSkip         = "TriggerRuleSkip"
	ReasonForceDeleted     = "ForceDeleted"
	ReasonNothingToRun     = "NothingToRun"
	ReasonReleasedByHand   = "ReleasedByHand"
	ReasonRunDeleted       = "RunDeleted"
	ReasonPermanentError   = "PermanentError"
	ReasonRetriesExhausted = "RetriesExhausted"
	ReasonDeadlineExceeded = "DeadlineExceeded"
	ReasonNodeLost         = "NodeLost"
	ReasonNamespaceDeleted = "NamespaceDeleted"
	ReasonVolumeMissing    = "VolumeMissing"
	ReasonNodeNotReady     = "NodeNotReady"
	ReasonPolicyNotFound   = "PolicyNotFound"
	ReasonSecretNotFound   = "SecretNotFound"
	ReasonBadAnnotation    = "InvalidAnnotation"
	ReasonConfigError      = "ConfigError"
	ReasonDeferPodFailed   = "DeferPodFailed"
	ReasonReleased         = "Released"
	ReasonRetained         = "Retained"
	ReasonResolved         = "Resolved"
)

// Finished reports whether the run has reached a final state.
func Finished(run *v1.DeferRun) bool {
	return meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunSucceeded) ||
		meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunFailed) ||
		meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunSkipped)
}

// setCondition sets a condition with the run's generation; it keeps the
// transition time when the status does not change.
func setCondition(st *v1.DeferRunStatus, gen int64, typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: truncate(msg, 1024), ObservedGeneration: gen})
}

// State digests the conditions into one word for display.
func State(st *v1.DeferRunStatus) string {
	for _, t := range []string{v1.DeferRunSucceeded, v1.DeferRunFailed, v1.DeferRunSkipped, v1.DeferRunStagingOut, v1.DeferRunTriggered, v1.DeferRunArmed} {
		if meta.IsStatusConditionTrue(st.Conditions, t) {
			return t
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
