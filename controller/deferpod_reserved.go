package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// A defer container never mounts the defer pod's volumes that are kdefer's
// (v1.IsReservedVolume): the logs token is for the stage steps alone, the
// CA bundle may be a Secret's key, /tmp holds the stage-out step's files.
// Admission refuses a policy that asks for one (v1.ValidateVolumeMounts),
// and arming refuses the effective policy of one stored before that rule
// (the run's ConfigError); the builder still leaves them out, for a run
// armed before the rule, or a DeferRun written by hand, and the run says
// so (ReservedMounts, an event when its defer pod is created).

// withoutReservedMounts returns mounts without those of kdefer's volumes.
func withoutReservedMounts(mounts []corev1.VolumeMount) []corev1.VolumeMount {
	return slices.DeleteFunc(slices.Clone(mounts), func(m corev1.VolumeMount) bool { return v1.IsReservedVolume(m.Name) })
}

// ReservedMounts describes the mounts of kdefer's volumes that the policy's
// defer containers ask for and the defer pod leaves out, in admission's
// words (field, problem, fix), under the run's spec.policy; none for a
// policy admission accepted.
func ReservedMounts(pol *v1.DeferPolicySpec) []string {
	var out []string
	for i, c := range pol.DeferContainers {
		for _, e := range v1.ValidateVolumeMounts(c.VolumeMounts, field.NewPath("spec", "policy", "deferContainers").Index(i).Child("volumeMounts")) {
			out = append(out, e.Error())
		}
	}
	return out
}
