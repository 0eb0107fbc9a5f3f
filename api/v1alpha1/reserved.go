package v1alpha1

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The names kdefer gives what it adds to users' pods (render: stage-in init
// containers, the S3 CA bundle's volume) and what it puts around users'
// defer containers in a defer pod (the stage-out step, the stage-logs
// sidecar, their logs token, /tmp and CA bundle). kdefer tells its own
// containers and volumes from the user's by these names, and a user's
// templates and DeferPolicies are untrusted input: a container of theirs
// under one of these names could be taken for kdefer's (and be given the
// stage credentials), and a mount of one of these volumes hands a user's
// container what only kdefer's steps may hold. So admission and `kdefer
// lint` refuse them (one rule each, below), and the builders never honour
// them in what was stored before these rules existed.
//
// The work volume is not among them: its default name, kdefer-work, is a
// volume users declare and mount themselves, and defer containers get it.

// Container names.
const (
	// StageInContainerName is the name of the stage-in init container of a
	// rendered pod, or the prefix of their names ("kdefer-stage-in-0", ...)
	// when there are several. Every name with this prefix is kdefer's.
	StageInContainerName = "kdefer-stage-in"
	// StageOutStepName is the name of the built-in stage-out step of a
	// defer pod.
	StageOutStepName = "stage-out"
	// StageLogsName is the name of the built-in sidecar of a defer pod that
	// archives the defer containers' logs when the defer pod ends
	// (stageOut.logs).
	StageLogsName = "stage-logs"
)

// Volume names.
const (
	// S3CABundleVolume holds a policy's spec.s3.caBundle, mounted into the
	// stage steps only (stage-in in a rendered pod, stage-out and stage-logs
	// in a defer pod).
	S3CABundleVolume = "kdefer-s3-ca"
	// LogsTokenVolume holds the stage steps' projected token for kdefer's
	// logs endpoint, in a defer pod.
	LogsTokenVolume = "kdefer-logs-token"
	// WebIdentityVolume holds the stage steps' projected token for the
	// store's identity provider (spec.webIdentity), in a rendered pod
	// (stage-in) and a defer pod (stage-out and stage-logs).
	WebIdentityVolume = "kdefer-web-identity"
	// TmpVolume is the stage-out step's /tmp (its spilled file lists and
	// manifest), in a defer pod.
	TmpVolume = "kdefer-tmp"
)

// reservedVolumes says what each of kdefer's volumes holds, for the errors.
var reservedVolumes = map[string]string{
	S3CABundleVolume:  "the stage steps' S3 CA bundle",
	LogsTokenVolume:   "the stage steps' token for kdefer's logs endpoint",
	TmpVolume:         "the stage-out step's /tmp",
	WebIdentityVolume: "the stage steps' token for the store's identity provider",
}

// IsReservedVolume reports whether name is the name of a volume kdefer adds
// to a pod.
func IsReservedVolume(name string) bool {
	_, ok := reservedVolumes[name]
	return ok
}

// IsStageInContainer reports whether name is one kdefer gives its stage-in
// containers (StageInContainerName, alone or as a prefix).
func IsStageInContainer(name string) bool {
	return strings.HasPrefix(name, StageInContainerName)
}

// ValidateVolumeMounts refuses a user's container's mounts of kdefer's
// volumes: a defer container's (only kdefer's steps may hold what they
// hold) and a pod template container's alike.
func ValidateVolumeMounts(mounts []corev1.VolumeMount, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, m := range mounts {
		if what, ok := reservedVolumes[m.Name]; ok {
			errs = append(errs, field.Forbidden(fld.Index(i).Child("name"),
				fmt.Sprintf("%q is reserved for kdefer (%s); fix: mount a volume of your own under another name, or remove the mount", m.Name, what)))
		}
	}
	return errs
}

// ValidateVolumeName refuses one of kdefer's volume names for a volume of
// the user's: a pod template's, or the work volume a policy or annotation
// names (kdefer would replace it, or the defer pod would hold two volumes
// of that name).
func ValidateVolumeName(name string, fld *field.Path) field.ErrorList {
	what, ok := reservedVolumes[name]
	if !ok {
		return nil
	}
	return field.ErrorList{field.Forbidden(fld, fmt.Sprintf("%q is reserved for kdefer (%s); fix: rename the volume", name, what))}
}

// ValidateTemplateContainerName refuses a container of a user's pod
// template named as kdefer's stage-in containers, which alone receive the
// credentials Secret.
func ValidateTemplateContainerName(name string, fld *field.Path) field.ErrorList {
	if !IsStageInContainer(name) {
		return nil
	}
	return field.ErrorList{field.Forbidden(fld, fmt.Sprintf("%q is reserved for kdefer (names starting with %q are its stage-in containers'); fix: rename the container", name, StageInContainerName))}
}

// ValidateDeferContainerName refuses a defer container named as one of the
// defer pod's built-in containers, whose logs and results kdefer reads by
// name.
func ValidateDeferContainerName(name string, fld *field.Path) field.ErrorList {
	if name != StageOutStepName && name != StageLogsName {
		return nil
	}
	return field.ErrorList{field.Forbidden(fld, fmt.Sprintf("%q is reserved for kdefer (the defer pod's built-in %s container); fix: rename the container", name, name))}
}
