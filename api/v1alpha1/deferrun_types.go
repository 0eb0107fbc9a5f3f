package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DeferRunSpec identifies the managed pod a DeferRun serves and the policy
// it runs. It is written once, when the run is armed; what is learned when
// the pod ends (trigger, exit codes, node) is status.
type DeferRunSpec struct {
	// podName of the managed pod.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.podName is immutable"
	PodName string `json:"podName"`

	// podUID of the managed pod.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.podUID is immutable"
	PodUID types.UID `json:"podUID"`

	// jobName of the Job that owns the pod, if any.
	// +optional
	JobName string `json:"jobName,omitempty"`

	// completionIndex of the pod in an Indexed Job.
	// +optional
	CompletionIndex *int32 `json:"completionIndex,omitempty"`

	// volumes retained for the defer run.
	// +optional
	// +listType=map
	// +listMapKey=name
	Volumes []RetainedVolume `json:"volumes,omitempty"`

	// policy is the effective policy (the named DeferPolicy with the Job's
	// annotations applied) when the run was armed. Later edits of the
	// DeferPolicy do not change a run already armed.
	// +required
	Policy DeferPolicySpec `json:"policy"`

	// policyName is the DeferPolicy the run was armed from, if any.
	// +optional
	PolicyName string `json:"policyName,omitempty"`

	// stageUser is who the built-in stage-out step runs as, taken from the
	// pod's securityContext when the run was armed, so that it can read
	// what the pod's containers wrote. Unset: the defer pod's user, 65532.
	// +optional
	StageUser *StageUser `json:"stageUser,omitempty"`
}

// StageUser is the user and groups of the built-in stage-out step.
type StageUser struct {
	// runAsUser of the stage-out step: the UID every regular container of
	// the pod ran as, when it is known, the same for all and not root.
	// Unset: 65532.
	// +optional
	// +kubebuilder:validation:Minimum=1
	RunAsUser *int64 `json:"runAsUser,omitempty"`

	// runAsGroup of the stage-out step: the GID every regular container of
	// the pod ran as, when runAsUser is set and the GID is known, the same
	// for all and not 0. Unset: 65532.
	// +optional
	// +kubebuilder:validation:Minimum=1
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`

	// supplementalGroups of the defer pod: the pod's fsGroup and
	// supplementalGroups and its regular containers' GIDs (0 left out), so
	// that files readable by one of those groups can be read.
	// +optional
	// +listType=atomic
	SupplementalGroups []int64 `json:"supplementalGroups,omitempty"`
}

// RetainedVolume is a pod volume kept alive for the defer run.
type RetainedVolume struct {
	// name of the volume in the pod.
	// +required
	Name string `json:"name"`
	// claimName of the PersistentVolumeClaim behind it.
	// +required
	ClaimName string `json:"claimName"`
}

// ContainerExit is how one main container ended.
type ContainerExit struct {
	// name of the container.
	// +required
	Name string `json:"name"`
	// exitCode of its last termination.
	// +required
	ExitCode int32 `json:"exitCode"`
	// reason of its last termination (e.g. OOMKilled, Error, Completed).
	// +optional
	Reason string `json:"reason,omitempty"`
}

// DeferRunStatus records why the pod ended and what the defer run did.
// Conditions are authoritative; state is a one-word digest of them for
// display. The trigger, exit codes and node are written with the first
// status after the pod ended (StagingOut, or the final status when the
// defer pod finished first).
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.trigger) || (has(self.trigger) && self.trigger == oldSelf.trigger)",message="status.trigger cannot change once set"
type DeferRunStatus struct {
	// trigger says why the pod's main containers ended; set once.
	// +optional
	Trigger Trigger `json:"trigger,omitempty"`

	// exitCodes of the pod's main containers, by container name.
	// +optional
	// +listType=map
	// +listMapKey=name
	ExitCodes []ContainerExit `json:"exitCodes,omitempty"`

	// nodeName the pod ran on; the defer pod runs there too.
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// conditions of the run: Armed, Triggered, StagingOut, Succeeded, Failed, Skipped,
	// VolumeReleased, ConfigError when the run waits for a fix, and
	// Incomplete when a stage-out could not store every file.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// state digests the conditions: Armed, Triggered, StagingOut,
	// Succeeded, Failed or Skipped.
	// +optional
	State string `json:"state,omitempty"`

	// deferPodName of the pod that runs the steps.
	// +optional
	DeferPodName string `json:"deferPodName,omitempty"`

	// steps of the defer pod, in order, with their attempts.
	// +optional
	// +listType=map
	// +listMapKey=name
	Steps []StepStatus `json:"steps,omitempty"`

	// bytes uploaded by stage-out (objects skipped as already complete not
	// counted).
	// +optional
	Bytes int64 `json:"bytes,omitempty"`

	// objects uploaded by stage-out.
	// +optional
	Objects int64 `json:"objects,omitempty"`

	// skipped objects already complete in the bucket.
	// +optional
	Skipped int64 `json:"skipped,omitempty"`

	// unsaved files the stage-out could not store (unreadable, vanished,
	// not a regular file, ...), each listed with its reason in the
	// manifest. Non-zero: the run is Incomplete and keeps its volume.
	// +optional
	Unsaved int64 `json:"unsaved,omitempty"`

	// retainedBytes is the disk the run's kept work volumes hold on the
	// node: their PVCs' capacity (else their requested size), recorded when
	// the volumes are kept and cleared when they are released.
	// +optional
	RetainedBytes int64 `json:"retainedBytes,omitempty"`

	// manifestURL of the manifest that marks the upload complete.
	// +optional
	ManifestURL string `json:"manifestURL,omitempty"`

	// deadline of the run as it is enforced: the policy's deadline, capped
	// by the cluster-wide maximum (kdefer-controller --max-deadline).
	// Recorded when the run's configuration is complete.
	// +optional
	Deadline *metav1.Duration `json:"deadline,omitempty"`

	// refusals counts the defer pods the node refused to admit (for example
	// OutOfcpu, or Evicted under disk pressure) or evicted; each was created
	// again after a backoff. The run fails for it only when its deadline
	// passes first.
	// +optional
	Refusals *DeferPodRefusals `json:"refusals,omitempty"`

	// retries records the run resumed after it failed: by `kdefer retry`
	// (annotation kdefer.io/retry) or by its node returning after a
	// NodeLost failure. Each resume gets a fresh deadline and a new defer
	// pod that runs only the steps that have not succeeded yet.
	// +optional
	Retries *DeferRunRetries `json:"retries,omitempty"`

	// triggeredAt is when the pod's main containers were seen ended.
	// +optional
	TriggeredAt *metav1.Time `json:"triggeredAt,omitempty"`

	// startTime of the defer pod.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime of the run (succeeded, failed or skipped).
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// DeferPodRefusals counts the defer pods of a run that their node refused
// or evicted, with the last one's reason.
type DeferPodRefusals struct {
	// count of defer pods refused or evicted so far.
	// +required
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
	// lastReason is how the node put the last refusal: the pod's
	// status.reason (OutOfcpu, OutOfmemory, Evicted,
	// UnexpectedAdmissionError, NodeAffinity, ...), or the reason of its
	// DisruptionTarget condition.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	LastReason string `json:"lastReason"`
	// lastMessage of the last refusal, shortened.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	LastMessage string `json:"lastMessage,omitempty"`
	// lastTime the last refusal was seen; the next defer pod is created
	// after a backoff from it (2 s, doubling, at most 1 min).
	// +required
	LastTime metav1.Time `json:"lastTime"`
}

// DeferRunRetries counts the times a failed run was resumed and keeps the
// failed attempts.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.count) || (has(self.count) && self.count >= oldSelf.count)",message="status.retries.count cannot decrease"
type DeferRunRetries struct {
	// count of resumes so far; the defer pod of the current attempt
	// carries it in annotation kdefer.io/attempt.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Count int32 `json:"count,omitempty"`
	// handledRequest is the value of the last kdefer.io/retry annotation
	// the controller acted on, granted or refused, so that each request is
	// handled once (as a Deployment's restartedAt is).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	HandledRequest string `json:"handledRequest,omitempty"`
	// lastTime the run was resumed: its fresh deadline counts from here.
	// +optional
	LastTime *metav1.Time `json:"lastTime,omitempty"`
	// history of the failed attempts, oldest first; the oldest are dropped
	// past 10.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	History []DeferRunAttempt `json:"history,omitempty"`
}

// DeferRunAttempt is one failed attempt of a run and how it was resumed.
type DeferRunAttempt struct {
	// reason the attempt failed (the Failed condition's reason).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason"`
	// message of the Failed condition, shortened.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
	// failedAt is when the attempt failed.
	// +optional
	FailedAt *metav1.Time `json:"failedAt,omitempty"`
	// resumedBy says what resumed the run after it: RetryRequested (`kdefer
	// retry`) or NodeReturned.
	// +required
	// +kubebuilder:validation:Enum=RetryRequested;NodeReturned
	ResumedBy string `json:"resumedBy"`
	// refusals of the attempt's defer pods by their node.
	// +optional
	Refusals int32 `json:"refusals,omitempty"`
}

// StepStatus is one step of a defer run.
type StepStatus struct {
	// name of the step ("stage-out" or a defer container's name).
	// +required
	Name string `json:"name"`
	// attempts started so far.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// exitCode of the last attempt that ended.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// message of the last attempt (its termination message, shortened).
	// +optional
	Message string `json:"message,omitempty"`
}

// DeferRun is the record of one managed pod's defer run. It outlives the pod
// and co-owns the pod's work volume until the run has handled it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=drun,categories=kdefer
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=`.spec.jobName`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.podName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Trigger",type=string,JSONPath=`.status.trigger`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Bytes",type=integer,JSONPath=`.status.bytes`
// +kubebuilder:printcolumn:name="Unsaved",type=integer,JSONPath=`.status.unsaved`,priority=1
// +kubebuilder:printcolumn:name="Refused",type=integer,JSONPath=`.status.refusals.count`,priority=1
// +kubebuilder:printcolumn:name="Retries",type=integer,JSONPath=`.status.retries.count`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DeferRun struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec identifies the managed pod the DeferRun serves and the policy it
	// runs. It is written once, when the run is armed; what is learned when
	// the pod ends (trigger, exit codes, node) is status.
	// +optional
	Spec DeferRunSpec `json:"spec,omitempty"`
	// status records why the pod ended and what the defer run did.
	// Conditions are authoritative; state is a one-word digest of them for
	// display. The trigger, exit codes and node are written with the first
	// status after the pod ended (StagingOut, or the final status when the
	// defer pod finished first).
	// +optional
	Status DeferRunStatus `json:"status,omitempty"`
}

// DeferRunList is a list of DeferRun.
// +kubebuilder:object:root=true
type DeferRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DeferRun `json:"items"`
}
