package v1alpha1

import "github.com/kdefer/kdefer/internal/version"

// Labels. The opt-in label selects Jobs for the webhooks; the others are set
// by render and scope the controller's caches, so unmanaged objects cost
// nothing.
const (
	// LabelEnabled opts a Job in ("true"). It is the webhooks' objectSelector.
	LabelEnabled = "kdefer.io/enabled"
	// LabelManaged marks pods rendered by kdefer ("true") and defer pods
	// (ManagedDeferPod).
	LabelManaged = "kdefer.io/managed"
	// LabelWorkVolume marks kdefer's work PVCs; its value is the volume name
	// in the pod. The ValidatingAdmissionPolicy that guards retained volumes
	// selects on it.
	LabelWorkVolume = "kdefer.io/work-volume"
	// LabelDeferRun is set on defer pods to the name of their DeferRun.
	LabelDeferRun = "kdefer.io/deferrun"
	// LabelPodName is set on DeferRuns to the name of the pod they serve.
	LabelPodName = "kdefer.io/pod"
	// LabelJobName is set on DeferRuns to the name of the Job they serve.
	LabelJobName = "kdefer.io/job"
	// LabelKept is set, when kdefer is uninstalled, on a work PVC whose run
	// had not finished or had retained it: its value is the run's name
	// (LabelValue). The PVC then has no owner; `kdefer release` deletes it.
	LabelKept = "kdefer.io/kept"

	// LabelPlatformPolicy is set by the controller on the namespaces a
	// ClusterDeferPolicy selects, to the policy's name ("" when several
	// select it). It is the namespaceSelector that brings their plain
	// Jobs to the webhooks; only the policies' own selectors decide what
	// applies, so a namespace that labels itself gains nothing.
	LabelPlatformPolicy = "kdefer.io/platform-policy"
)

// AnnotationKept on a kept work PVC (LabelKept) says why it was kept and
// which DeferRun it served.
const AnnotationKept = "kdefer.io/kept"

// ManagedDeferPod is the LabelManaged value of defer pods.
const ManagedDeferPod = "defer"

// Annotations on defer pods naming the DeferRun they serve. A defer pod is
// owned by its run's work PVCs, not by the run, so that it goes with them
// when they are released; these say whose it is.
const (
	// AnnotationDeferRunName is the DeferRun's name (the LabelDeferRun
	// label may be shortened to fit 63 characters).
	AnnotationDeferRunName = "kdefer.io/deferrun"
	// AnnotationDeferRunUID is the DeferRun's UID.
	AnnotationDeferRunUID = "kdefer.io/deferrun-uid"
	// AnnotationAttempt is the run's status.retries.count when the defer
	// pod was created (absent: 0); a defer pod of an earlier attempt of a
	// resumed run is stale and deleted.
	AnnotationAttempt = "kdefer.io/attempt"
)

// Annotations on a Job (or its pod template) that configure kdefer without a
// DeferPolicy. Annotations override the fields of the policy named by
// AnnotationPolicy. They are parsed by ParseAnnotations, and nowhere else.
const (
	// AnnotationPolicy names a DeferPolicy in the Job's namespace.
	AnnotationPolicy = "kdefer.io/policy"
	// AnnotationStageOut is the URL template outputs are uploaded under,
	// e.g. "s3://bucket/runs/{namespace}/{job}/{pod}/?endpoint=http://10.88.0.1:9000".
	AnnotationStageOut = "kdefer.io/stage-out"
	// AnnotationStageOutPath is the directory, relative to the work volume,
	// that is uploaded (default: the whole volume).
	AnnotationStageOutPath = "kdefer.io/stage-out-path"
	// AnnotationInclude and AnnotationExclude are comma-separated globs
	// matched against paths relative to the stage-out directory.
	AnnotationInclude = "kdefer.io/include"
	AnnotationExclude = "kdefer.io/exclude"
	// AnnotationStageIn is a comma-separated list of source URLs (a prefix, or
	// a manifest object ending in _kdefer/manifest.json) downloaded before the
	// main containers start.
	AnnotationStageIn = "kdefer.io/stage-in"
	// AnnotationStageInPath is the directory, relative to the work volume,
	// stage-in writes to (default "inputs").
	AnnotationStageInPath = "kdefer.io/stage-in-path"
	// AnnotationCredentials names a Secret in the Job's namespace whose keys
	// are passed as environment variables to the stage steps only (e.g.
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
	AnnotationCredentials = "kdefer.io/credentials"
	// AnnotationWorkVolume names the pod volume that holds the outputs: an
	// existing emptyDir volume is converted, an existing generic ephemeral
	// volume adopted; a missing one is created only when a mount path is
	// given too (AnnotationWorkMountPath or the policy's), else refused as a
	// likely misspelling.
	AnnotationWorkVolume = "kdefer.io/work-volume"
	// AnnotationWorkMountPath is where a newly created work volume is mounted
	// in every main container (default "/kdefer").
	AnnotationWorkMountPath = "kdefer.io/work-mount-path"
	// AnnotationWorkSize is the work PVC's requested size (default "1Gi").
	AnnotationWorkSize = "kdefer.io/work-size"
	// AnnotationStorageClass is the work PVC's storage class (default: the
	// cluster default).
	AnnotationStorageClass = "kdefer.io/storage-class"
	// AnnotationTriggers is a comma-separated list of triggers that run the
	// defer steps ("all", or names such as "Succeeded,Failed,OOMKilled").
	AnnotationTriggers = "kdefer.io/triggers"
	// AnnotationDeadline bounds a whole defer run (Go duration, e.g. "30m").
	AnnotationDeadline = "kdefer.io/deadline"
	// AnnotationSkip ("true") on a Job or pod skips its defer runs; the
	// volume and pod are released without staging out. A Job without
	// kdefer's label that a ClusterDeferPolicy selects is then not armed at
	// all, unless the policy is locked (spec.locked), which refuses it.
	AnnotationSkip = "kdefer.io/skip"
	// AnnotationRendered records that a template was rendered, with the
	// render version; rendering a rendered template changes nothing.
	AnnotationRendered = "kdefer.io/rendered"
	// AnnotationClusterPolicy is written by the webhooks on the pod
	// template of a Job a ClusterDeferPolicy applies to, naming it, so the
	// controller arms its pods with the policy admission chose (it checks
	// again that the policy selects the namespace).
	AnnotationClusterPolicy = "kdefer.io/cluster-policy"
	// AnnotationSummary is written by the controller on a Job, e.g.
	// "3/3 staged out".
	AnnotationSummary = "kdefer.io/summary"
)

// Finalizers.
const (
	// PodFinalizer is on every managed pod from birth, so the controller sees
	// every pod before it disappears, even after its own downtime.
	PodFinalizer = "kdefer.io/defer"
	// DeferRunFinalizer keeps a DeferRun until its volume is handled.
	DeferRunFinalizer = "kdefer.io/release"
)

// Images. A release publishes them under internal/version.Registry; the
// local cluster, which has no registry, imports `make images` tarballs named
// under ImageRepository.
const (
	ImageRepository     = "kdefer.io"
	StageImageName      = "kdefer-stage"
	ControllerImageName = "kdefer-controller"
)

// DefaultStageImage is the image of kdefer-stage used by stage-in init
// containers and defer pods unless the manager is told otherwise: the one
// published with this build (internal/version's Registry and Version).
func DefaultStageImage() string {
	return version.Registry + "/" + StageImageName + ":" + version.Version
}
