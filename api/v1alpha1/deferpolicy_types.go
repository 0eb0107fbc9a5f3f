package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeferPolicySpec says what happens to a managed pod's work volume after its
// main containers end. Jobs name a policy with the kdefer.io/policy
// annotation; their other kdefer.io annotations override its fields.
// +kubebuilder:validation:XValidation:rule="has(self.stageOut) || (has(self.deferContainers) && size(self.deferContainers) > 0)",message="a policy needs stageOut or at least one entry in deferContainers: set spec.stageOut.url"
// +kubebuilder:validation:XValidation:rule="!has(self.locked) || !('stageOut' in self.locked) || has(self.stageOut)",message="spec.locked holds stageOut but spec.stageOut is not set: set spec.stageOut.url (the destination Jobs cannot change), or remove stageOut from spec.locked"
// +kubebuilder:validation:XValidation:rule="!has(self.locked) || !('stageIn' in self.locked) || has(self.stageIn)",message="spec.locked holds stageIn but spec.stageIn is not set: set spec.stageIn (the sources Jobs cannot change), or remove stageIn from spec.locked"
type DeferPolicySpec struct {
	// namespaceDefault makes this policy its namespace's default: it
	// applies to every opted-in Job and pod of the namespace that names no
	// policy with kdefer.io/policy. A namespace has at most one default
	// (admission refuses a second, naming the first). A default with
	// locked fields is mandatory: a Job or pod of its namespace that names
	// another policy is refused too, so none steps around the locks.
	// +optional
	NamespaceDefault bool `json:"namespaceDefault,omitempty"`

	// locked lists the fields of this policy that a Job's kdefer.io
	// annotations may not override, so the policy's owner decides where
	// outputs go and which credentials the stage steps hold: stageOut
	// (kdefer.io/stage-out, stage-out-path, include, exclude), stageIn
	// (kdefer.io/stage-in, stage-in-path) and credentials
	// (kdefer.io/credentials). A Job that sets a locked annotation is
	// refused, naming it. Locking credentials on a policy without
	// credentials keeps every Secret out of its stage steps.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	Locked []LockedField `json:"locked,omitempty"`

	// stageOut uploads the work volume (or a directory of it) to object
	// storage; it runs first in every defer run.
	// +optional
	StageOut *StageOut `json:"stageOut,omitempty"`

	// stageIn downloads inputs into the work volume before the main
	// containers start, in an init container that alone holds credentials.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	StageIn []StageIn `json:"stageIn,omitempty"`

	// credentials names a Secret in the pod's namespace whose keys become
	// environment variables of the stage steps only (for example
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY). Main containers never
	// receive them.
	// +optional
	Credentials *corev1.LocalObjectReference `json:"credentials,omitempty"`

	// serviceAccountName is the ServiceAccount of the policy's defer pods
	// (default: the namespace's default). It must exist in the pod's
	// namespace. It is the identity webIdentity's token names; with
	// webIdentity, a Job whose pod template names no ServiceAccount gets
	// this one too when the policy stages in, so that stage-in and
	// stage-out share the identity (docs/usage.md#cloud-identity). Give it no RBAC: no kdefer step talks
	// to the Kubernetes API with it, and defer pods mount no API token.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="serviceAccountName must be a DNS subdomain (lowercase letters, digits, '-' and '.')"
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// imagePullSecrets are Secrets of the pod's namespace the kubelet pulls
	// the defer pods' images with (the stage image, the defer containers'),
	// added to the pods of Jobs that stage in (for the stage image) and to
	// the pre-pull pods.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// webIdentity gives kdefer's stage steps, and them alone, a projected
	// service-account token to exchange for the store's temporary
	// credentials (AWS IRSA, an S3 server's STS, Azure workload identity)
	// instead of a credentials Secret. The token names the pod's
	// ServiceAccount: serviceAccountName in the defer pod, the Job's in its
	// stage-in container. Main containers and defer containers never mount
	// it.
	// +optional
	WebIdentity *WebIdentity `json:"webIdentity,omitempty"`

	// s3 sets S3-compatibility switches (checksum mode, addressing style,
	// region, a CA bundle) for every s3:// URL of stageOut and stageIn; a
	// parameter a URL sets itself wins (docs/stage.md#s3-settings).
	// +optional
	S3 *S3Settings `json:"s3,omitempty"`

	// workVolume is the pod volume that holds the outputs. An emptyDir volume
	// of that name is converted to a generic ephemeral volume; a missing one
	// is created and mounted in every main container, under the default name
	// or when mountPath is set (a named volume missing from a Job without a
	// mount path is refused as a likely misspelling).
	// +optional
	WorkVolume WorkVolume `json:"workVolume,omitempty"`

	// deferContainers run in order after the built-in stage-out, on the same
	// node, with the work volume mounted. Each is told the trigger in
	// KDEFER_TRIGGER. They meet the Pod Security Standard "restricted": a
	// securityContext may tighten it, never weaken it (no privileged, added
	// capabilities but NET_BIND_SERVICE, root, privilege escalation,
	// unconfined profiles or host ports), they never receive the
	// credentials Secret (envFrom is dropped), and they never mount
	// kdefer's own volumes (kdefer-logs-token, kdefer-tmp, kdefer-s3-ca,
	// kdefer-web-identity)
	// nor take the built-in containers' names (stage-out, stage-logs).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	DeferContainers []corev1.Container `json:"deferContainers,omitempty"`

	// triggerRules select, per trigger, what a defer run does. The first rule
	// that lists the trigger applies; a trigger no rule lists runs every step
	// on the whole stage-out directory.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	TriggerRules []TriggerRule `json:"triggerRules,omitempty"`

	// deadline bounds a whole defer run, retries included (default 30m).
	// +optional
	Deadline *metav1.Duration `json:"deadline,omitempty"`

	// retryLimit is how often a failed step is retried (default 3).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	RetryLimit *int32 `json:"retryLimit,omitempty"`

	// onFailure says what to do with the work volume when a defer run fails.
	// +optional
	OnFailure *OnFailure `json:"onFailure,omitempty"`

	// ttlSecondsAfterFinished deletes a finished DeferRun after this many
	// seconds (default 86400); 0 deletes it as soon as its volume is handled.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// priorityClassName of the defer pods (default: the manager's
	// --defer-priority-class, system-node-critical, the class the kubelet
	// admits under disk and memory pressure). Defer pods request no CPU or
	// memory, so a critical class never makes the kubelet evict running pods
	// to admit them.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// deleteEndedPod says when kdefer deletes the ended pod itself after a
	// run that succeeded (not Incomplete) and released its work volume, so
	// that pvc-protection lets the volume, and its disk, go at once instead
	// of when the Job is cleaned up: OnPressure (default: after trigger
	// Evicted, when the node wants its disk back), Always, or Never. The
	// Job's accounting is unaffected: kdefer waits until the Job controller
	// has counted the pod (its batch.kubernetes.io/job-tracking finalizer
	// is gone).
	// +optional
	DeleteEndedPod PodDeletion `json:"deleteEndedPod,omitempty"`

	// prePull pulls the defer images on the node while the main pod runs
	// (default true), so a defer run does not wait for a pull.
	// +optional
	PrePull *bool `json:"prePull,omitempty"`

	// nodeLostTimeout is how long a defer run waits for a NotReady or missing
	// node to return before it fails with reason NodeLost (default 10m).
	// +optional
	NodeLostTimeout *metav1.Duration `json:"nodeLostTimeout,omitempty"`
}

// WebIdentity is the projected token kdefer's stage steps exchange for a
// store's credentials, and where they exchange it: exactly one of s3 and
// azure.
// +kubebuilder:validation:XValidation:rule="has(self.s3) != has(self.azure)",message="webIdentity needs exactly one of s3 and azure: set webIdentity.s3.roleARN (AWS, or an S3 server's STS) or webIdentity.azure (clientID, tenantID)"
type WebIdentity struct {
	// audience of the token: the one the identity provider trusts
	// (default sts.amazonaws.com with s3, api://AzureADTokenExchange with
	// azure; an S3 server's OpenID client ID).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Audience string `json:"audience,omitempty"`

	// expirationSeconds is the token's lifetime (default 3600, at least
	// 600, the least the apiserver issues); the kubelet renews it at 80%.
	// +optional
	// +kubebuilder:validation:Minimum=600
	// +kubebuilder:validation:Maximum=86400
	ExpirationSeconds *int64 `json:"expirationSeconds,omitempty"`

	// s3 exchanges the token at an STS (AssumeRoleWithWebIdentity) for
	// s3:// URLs.
	// +optional
	S3 *S3WebIdentity `json:"s3,omitempty"`

	// azure exchanges the token at Microsoft Entra ID (workload identity
	// federation) for azblob:// URLs.
	// +optional
	Azure *AzureWebIdentity `json:"azure,omitempty"`
}

// S3WebIdentity is the role an S3 stage step assumes with its token.
type S3WebIdentity struct {
	// roleARN is the role assumed (AWS_ROLE_ARN): on AWS an IAM role whose
	// trust policy admits the cluster's OIDC provider, the audience and
	// the subject system:serviceaccount:NAMESPACE:SERVICEACCOUNT.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	RoleARN string `json:"roleARN"`

	// stsEndpoint is the STS the token is exchanged at
	// (AWS_ENDPOINT_URL_STS; default: the region's AWS STS), e.g. an
	// S3-compatible server's own (MinIO: its S3 endpoint).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://')",message="webIdentity.s3.stsEndpoint must be an http:// or https:// URL"
	STSEndpoint string `json:"stsEndpoint,omitempty"`
}

// AzureWebIdentity is the Entra ID application or managed identity an
// azblob stage step signs in as with its token.
type AzureWebIdentity struct {
	// clientID of the application or user-assigned managed identity whose
	// federated credential admits the token (AZURE_CLIENT_ID).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	ClientID string `json:"clientID"`

	// tenantID of the Entra ID tenant (AZURE_TENANT_ID).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	TenantID string `json:"tenantID"`
}

// StageOut configures the built-in upload.
type StageOut struct {
	// url is the destination prefix, a template: {namespace} {job} {pod}
	// {index} {trigger} {uid} are expanded per pod. Schemes: s3, gs, azblob,
	// and file where the cluster allows it (kdefer-controller
	// --allow-file-urls); mem (kdefer-stage's tests) is refused by admission.
	// S3 options go in the query (endpoint, region, use_path_style,
	// disable_https, checksum, ca_bundle) or in spec.s3.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(s3|gs|azblob|file|mem)://')",message="stageOut.url must start with s3://, gs://, azblob://, file:// or mem://"
	URL string `json:"url"`

	// path is the directory, relative to the work volume, that is uploaded
	// (default: the whole volume).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(s, s == '..')",message="stageOut.path must be relative to the work volume and must not contain '..'"
	Path string `json:"path,omitempty"`

	// include globs (relative to path); empty means everything.
	// +optional
	// +listType=atomic
	Include []string `json:"include,omitempty"`

	// exclude globs (relative to path), applied after include.
	// +optional
	// +listType=atomic
	Exclude []string `json:"exclude,omitempty"`

	// overwrite lets a stage-out replace the outputs another pod (an
	// earlier attempt: a Job retry, a re-run index) left under the same
	// prefix. By default it refuses, and its run fails with the name of the
	// pod whose manifest is there: a url without {pod} or {uid} expands to
	// the same prefix for every attempt.
	// +optional
	Overwrite bool `json:"overwrite,omitempty"`

	// requireFiles fails the stage-out step when it finds no file to upload
	// (an empty directory, or include/exclude choosing none), permanently:
	// the run ends Failed instead of succeeding with an empty manifest. By
	// default that is a warning in the step's log and the manifest lists no
	// file (kdefer-stage out --require-files).
	// +optional
	RequireFiles bool `json:"requireFiles,omitempty"`

	// checksums the manifest records for every file besides CRC32C, the
	// ones data catalogues register: adler32 (Rucio), md5, sha256. Each is
	// computed in the pass that uploads the file, not by a second read, and
	// verified by a stage-in from the manifest (kdefer-stage out
	// --checksums). MD5 and SHA-256 make a large file's multipart upload
	// send its parts one after the other; adler32 combines across parallel
	// parts as CRC32C does.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	Checksums []ManifestChecksum `json:"checksums,omitempty"`

	// logs archives the ended pod's container logs under the prefix's
	// _kdefer/logs/ before the manifest is written, and lists them in it
	// (on by default; see StageOutLogs).
	// +optional
	Logs *StageOutLogs `json:"logs,omitempty"`
}

// ManifestChecksum is a checksum a stage-out manifest records on request.
// +kubebuilder:validation:Enum=adler32;md5;sha256
type ManifestChecksum string

// The manifest checksums (stagecontract.ManifestChecksums).
const (
	ManifestChecksumAdler32 ManifestChecksum = "adler32"
	ManifestChecksumMD5     ManifestChecksum = "md5"
	ManifestChecksumSHA256  ManifestChecksum = "sha256"
)

// StageIn is one source downloaded before the main containers start.
type StageIn struct {
	// url is a prefix, or a manifest object ending in _kdefer/manifest.json
	// (then exactly its files are fetched and their checksums verified).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(s3|gs|azblob|file|mem)://')",message="stageIn.url must start with s3://, gs://, azblob://, file:// or mem://"
	URL string `json:"url"`

	// path is the directory, relative to the work volume, written to
	// (default "inputs").
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(s, s == '..')",message="stageIn.path must be relative to the work volume and must not contain '..'"
	Path string `json:"path,omitempty"`

	// allowUncommitted stages in a prefix that holds kdefer's _kdefer/
	// objects but no manifest (a stage-out that was stopped, failed or
	// still runs), its objects as they are. By default such a prefix fails
	// the stage-in: a prefix with a manifest gives exactly the files it
	// lists, verified, and one without kdefer's objects everything under it
	// (kdefer-stage in --allow-uncommitted).
	// +optional
	AllowUncommitted bool `json:"allowUncommitted,omitempty"`
}

// WorkVolume describes the volume whose contents outlive the pod.
type WorkVolume struct {
	// name of the pod volume (default "kdefer-work").
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="workVolume.name must be a DNS label (lowercase letters, digits and '-')"
	Name string `json:"name,omitempty"`

	// mountPath of a newly created work volume in every main container
	// (default "/kdefer"). A converted emptyDir keeps its own mounts.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="workVolume.mountPath must be absolute"
	MountPath string `json:"mountPath,omitempty"`

	// storageClassName of the work PVC (default: the cluster's default).
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// size requested for the work PVC (default 1Gi).
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// accessModes of the work PVC (default ReadWriteOnce).
	// +optional
	// +listType=atomic
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
}

// TriggerRule selects what a defer run does for some triggers.
type TriggerRule struct {
	// triggers this rule applies to.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +listType=set
	Triggers []Trigger `json:"triggers"`

	// action is Run (default) or Skip: Skip releases the volume without any
	// step.
	// +optional
	// +kubebuilder:validation:Enum=Run;Skip
	Action TriggerAction `json:"action,omitempty"`

	// include globs that replace stageOut.include for these triggers (e.g.
	// only logs and partial results on OOMKilled).
	// +optional
	// +listType=atomic
	Include []string `json:"include,omitempty"`

	// exclude globs that replace stageOut.exclude for these triggers.
	// +optional
	// +listType=atomic
	Exclude []string `json:"exclude,omitempty"`

	// url replaces stageOut.url for these triggers: a template with the
	// same placeholders, S3 options and settings (spec.s3). It sends some
	// endings elsewhere, e.g. a Job's succeeded pod to a prefix a later
	// Job stages in from ({namespace}/{job}/output/), while every other
	// attempt (evicted, failed) keeps its own ({job}/attempts/{pod}/), so
	// the later Job never takes a failed attempt's outputs. Needs
	// stageOut.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(s3|gs|azblob|file|mem)://')",message="triggerRules[].url must start with s3://, gs://, azblob://, file:// or mem://"
	URL string `json:"url,omitempty"`

	// deferContainers names the defer containers that run for these
	// triggers (default: all of them).
	// +optional
	// +listType=set
	DeferContainers []string `json:"deferContainers,omitempty"`
}

// TriggerAction is what a trigger rule does.
type TriggerAction string

const (
	// TriggerActionRun runs the defer pod for the rule's triggers.
	TriggerActionRun TriggerAction = "Run"
	// TriggerActionSkip runs no defer pod for the rule's triggers.
	TriggerActionSkip TriggerAction = "Skip"
)

// PodDeletion says when kdefer deletes a run's ended pod.
// +kubebuilder:validation:Enum=OnPressure;Always;Never
type PodDeletion string

const (
	// PodDeletionOnPressure deletes it after trigger Evicted.
	PodDeletionOnPressure PodDeletion = "OnPressure"
	// PodDeletionAlways deletes it after any trigger.
	PodDeletionAlways PodDeletion = "Always"
	// PodDeletionNever leaves it to the Job's cleanup.
	PodDeletionNever PodDeletion = "Never"
)

// LockedField is a DeferPolicy field Job annotations may not override.
// +kubebuilder:validation:Enum=stageOut;stageIn;credentials
type LockedField string

const (
	// LockedStageOut locks stageOut: its URL, path, include and exclude.
	LockedStageOut LockedField = "stageOut"
	// LockedStageIn locks stageIn: its URLs and paths.
	LockedStageIn LockedField = "stageIn"
	// LockedCredentials locks the credentials Secret's name.
	LockedCredentials LockedField = "credentials"
)

// LockedAnnotations are the annotations each locked field forbids.
var LockedAnnotations = map[LockedField][]string{
	LockedStageOut:    {AnnotationStageOut, AnnotationStageOutPath, AnnotationInclude, AnnotationExclude},
	LockedStageIn:     {AnnotationStageIn, AnnotationStageInPath},
	LockedCredentials: {AnnotationCredentials},
}

// OnFailure says what happens to the work volume when a defer run fails, or
// succeeds Incomplete (its stage-out could not store every file).
// +kubebuilder:validation:XValidation:rule="self.volume == 'Retain' || !has(self.retainFor)",message="onFailure.retainFor is only allowed with volume: Retain"
type OnFailure struct {
	// volume is Retain (default: keep the PVC for inspection or a rerun) or
	// Release (delete it).
	// +required
	// +kubebuilder:validation:Enum=Retain;Release
	Volume VolumeAction `json:"volume"`

	// retainFor releases a retained volume after this long (default: keep
	// until released by hand with `kdefer release`).
	// +optional
	RetainFor *metav1.Duration `json:"retainFor,omitempty"`
}

// VolumeAction is what happens to a work volume.
type VolumeAction string

const (
	// VolumeRetain keeps the work volume's PVC for inspection or a rerun.
	VolumeRetain VolumeAction = "Retain"
	// VolumeRelease deletes the work volume's PVC.
	VolumeRelease VolumeAction = "Release"
)

// DeferPolicyStatus is reserved for conditions about the policy itself.
type DeferPolicyStatus struct {
	// conditions of the policy (e.g. Valid).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DeferPolicy is a reusable description of what kdefer does after a managed
// pod's main containers end.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dpol,categories=kdefer
// +kubebuilder:printcolumn:name="Default",type=boolean,JSONPath=`.spec.namespaceDefault`
// +kubebuilder:printcolumn:name="Stage-Out",type=string,JSONPath=`.spec.stageOut.url`
// +kubebuilder:selectablefield:JSONPath=`.spec.namespaceDefault`
// +kubebuilder:printcolumn:name="Deadline",type=string,JSONPath=`.spec.deadline`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DeferPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what happens to a managed pod's work volume after its main
	// containers end. Jobs name a policy with the kdefer.io/policy
	// annotation; their other kdefer.io annotations override its fields.
	// +optional
	Spec DeferPolicySpec `json:"spec,omitempty"`
	// status is reserved for conditions about the policy itself.
	// +optional
	Status DeferPolicyStatus `json:"status,omitempty"`
}

// DeferPolicyList is a list of DeferPolicy.
// +kubebuilder:object:root=true
type DeferPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DeferPolicy `json:"items"`
}
