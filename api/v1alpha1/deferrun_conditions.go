package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/api/meta"
)

// Condition types of a DeferRun.
const (
	DeferRunArmed          = "Armed"
	DeferRunTriggered      = "Triggered"
	DeferRunStagingOut     = "StagingOut"
	DeferRunSucceeded      = "Succeeded"
	DeferRunFailed         = "Failed"
	DeferRunSkipped        = "Skipped"
	DeferRunVolumeReleased = "VolumeReleased"
	DeferRunConfigError    = "ConfigError"
	// DeferRunIncomplete is True on a Succeeded run whose stage-out could
	// not store every file (status.unsaved counts them; the manifest lists
	// each with its reason): the volume is kept like a failed run's.
	DeferRunIncomplete = "Incomplete"
)

// Reasons of a DeferRun's conditions. A trigger's name (TriggerSucceeded,
// ...) is the reason of the Triggered condition.
const (
	// Armed: the pod's work volume is co-owned by the run.
	ReasonArmed     = "Armed"
	ReasonTriggered = "Triggered"
	// StagingOut: the defer pod runs.
	ReasonStagingOut = "StagingOut"

	// Succeeded.
	ReasonSucceeded = "Succeeded"

	// Incomplete: the stage-out exited 0 with unsaved files.
	ReasonUnsavedFiles = "UnsavedFiles"

	// Skipped.
	ReasonSkipped          = "SkipRequested"
	ReasonRuleSkip         = "TriggerRuleSkip"
	ReasonForceDeleted     = "ForceDeleted"
	ReasonNothingToRun     = "NothingToRun"
	ReasonReleasedByHand   = "ReleasedByHand"
	ReasonRunDeleted       = "RunDeleted"
	ReasonNamespaceDeleted = "NamespaceDeleted"
	ReasonVolumeMissing    = "VolumeMissing"

	// Failed.
	ReasonPermanentError   = "PermanentError"
	ReasonRetriesExhausted = "RetriesExhausted"
	ReasonDeadlineExceeded = "DeadlineExceeded"
	ReasonNodeLost         = "NodeLost"
	ReasonDeferPodFailed   = "DeferPodFailed"
	ReasonConfigError      = "ConfigError"

	// Failed False again: a failed run was resumed, asked by `kdefer retry`
	// (annotation kdefer.io/retry) or by its node Ready again after
	// NodeLost with the work volume still there. The events of the resume
	// have these reasons too.
	ReasonRetryRequested = "RetryRequested"
	ReasonNodeReturned   = "NodeReturned"

	// StagingOut False while the run waits for its node.
	ReasonNodeNotReady = "NodeNotReady"
	// DeferPodRefused: StagingOut False while a defer pod the node refused
	// or evicted waits to be created again (the event of each refusal has
	// this reason too); Failed when the run's deadline passed meanwhile.
	ReasonDeferPodRefused = "DeferPodRefused"

	// ConfigError True while the configuration is incomplete, then False
	// with ReasonResolved.
	ReasonPolicyNotFound = "PolicyNotFound"
	// SecretNotFound and StepConfigError are reported by the defer pod's
	// kubelet (kdefer does not read Secrets): a step waits for a Secret,
	// or a ConfigMap, that does not exist.
	ReasonSecretNotFound = "SecretNotFound"
	ReasonStepConfig     = "StepConfigError"
	// ServiceAccountNotFound: the defer pod was refused for want of the
	// policy's serviceAccountName; kdefer creates it again until the
	// run's deadline.
	ReasonServiceAccountNotFound = "ServiceAccountNotFound"
	ReasonBadAnnotation          = "InvalidAnnotation"
	ReasonResolved               = "Resolved"
	// InvalidPolicy: the named DeferPolicy, with the pod's annotations,
	// breaks a rule admission now applies (a policy stored before it).
	ReasonInvalidPolicy = "InvalidPolicy"

	// VolumeReleased.
	ReasonReleased = "Released"
	ReasonRetained = "Retained"
)

// Reasons of the events on a DeferRun (and on its Job) besides the
// condition reasons above, which are event reasons too.
const (
	// EventDeferPodCreated: the defer pod was seen created (progress; not
	// repeated on the Job).
	EventDeferPodCreated = "DeferPodCreated"
	// EventRelocated: the node was lost and the defer pod runs elsewhere.
	EventRelocated = "Relocated"
	// EventVolumeReleased: the work volume was deleted (progress; not
	// repeated on the Job).
	EventVolumeReleased = "VolumeReleased"
	// EventIncomplete: the run succeeded without saving every file.
	EventIncomplete = "Incomplete"
	// EventEndedPodDeleted: the run's ended pod was deleted so that its
	// work volume goes (progress; not repeated on the Job).
	EventEndedPodDeleted = "EndedPodDeleted"
	// EventRetryRefused: a kdefer.io/retry request was not granted (the
	// run has not failed, or its volume is gone); the request is consumed.
	EventRetryRefused = "RetryRefused"
	// EventPriorityRefused: the defer pod's default priority class is not
	// allowed in the namespace; it was created without one.
	EventPriorityRefused = "PriorityClassRefused"
	// EventReservedMounts: the run's policy gives defer containers mounts
	// of kdefer's own volumes (a DeferPolicy stored before admission
	// refused them); the defer pod was created without them.
	EventReservedMounts = "ReservedMountsLeftOut"
	// EventDisarmed: kdefer is being uninstalled and removed its finalizer
	// from the pod; the note says what became of its run and work volume.
	EventDisarmed = "Disarmed"
)

// AnnotationRelease ("true") on a DeferRun releases its volume by hand
// (`kdefer release`); an unfinished run stops first.
const AnnotationRelease = "kdefer.io/release"

// AnnotationRetry on a DeferRun asks for a failed run to be resumed
// (`kdefer retry`, which sets it to the current time): a new defer pod runs
// the steps that have not succeeded, with a fresh deadline. Any new value
// is a new request; the controller records the one it handled in
// status.retries.handledRequest. It is granted only to a Failed run whose
// work volume is kept.
const AnnotationRetry = "kdefer.io/retry"

// Finished reports whether the run has reached a final state.
func Finished(run *DeferRun) bool {
	return meta.IsStatusConditionTrue(run.Status.Conditions, DeferRunSucceeded) ||
		meta.IsStatusConditionTrue(run.Status.Conditions, DeferRunFailed) ||
		meta.IsStatusConditionTrue(run.Status.Conditions, DeferRunSkipped)
}

// StateOf digests the conditions into one word for display (status.state):
// the most advanced condition that is True.
func StateOf(st *DeferRunStatus) string {
	for _, t := range []string{DeferRunSucceeded, DeferRunFailed, DeferRunSkipped, DeferRunStagingOut, DeferRunTriggered, DeferRunArmed} {
		if meta.IsStatusConditionTrue(st.Conditions, t) {
			return t
		}
	}
	return ""
}

// DeferPodName is the name of a DeferRun's defer pod: fixed, so a restarted
// controller finds the pod it created instead of creating a second one.
func DeferPodName(run *DeferRun) string { return shorten(run.Name+"-defer", 253) }

// LabelValue fits a name into a label value (63 characters), keeping it
// unique with a hash suffix when it must be cut.
func LabelValue(name string) string { return shorten(name, 63) }

func shorten(s string, max int) string {
	if len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:])[:10]
	return s[:max-11] + "-" + h
}
