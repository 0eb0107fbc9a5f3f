package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Each reserved-name rule names the field, whose the name is, and the fix;
// names that are not kdefer's pass, the work volume's default among them.
func TestReservedNames(t *testing.T) {
	msgs := func(errs field.ErrorList) []string {
		var out []string
		for _, e := range errs {
			out = append(out, e.Error())
		}
		return out
	}
	p := field.NewPath("spec")
	cases := []struct {
		name string
		got  field.ErrorList
		want []string
	}{
		{"mounts", ValidateVolumeMounts([]corev1.VolumeMount{{Name: DefaultWorkVolumeName}, {Name: LogsTokenVolume}, {Name: "data"}, {Name: TmpVolume}, {Name: S3CABundleVolume}}, p.Child("volumeMounts")),
			[]string{
				`spec.volumeMounts[1].name: Forbidden: "kdefer-logs-token" is reserved for kdefer (the stage steps' token for kdefer's logs endpoint); fix: mount a volume of your own under another name, or remove the mount`,
				`spec.volumeMounts[3].name: Forbidden: "kdefer-tmp" is reserved for kdefer (the stage-out step's /tmp); fix: mount a volume of your own under another name, or remove the mount`,
				`spec.volumeMounts[4].name: Forbidden: "kdefer-s3-ca" is reserved for kdefer (the stage steps' S3 CA bundle); fix: mount a volume of your own under another name, or remove the mount`,
			}},
		{"volume", ValidateVolumeName(S3CABundleVolume, p.Child("name")),
			[]string{`spec.name: Forbidden: "kdefer-s3-ca" is reserved for kdefer (the stage steps' S3 CA bundle); fix: rename the volume`}},
		{"work volume", ValidateVolumeName(DefaultWorkVolumeName, p.Child("name")), nil},
		{"stage-in", ValidateTemplateContainerName("kdefer-stage-in-2", p.Child("name")),
			[]string{`spec.name: Forbidden: "kdefer-stage-in-2" is reserved for kdefer (names starting with "kdefer-stage-in" are its stage-in containers'); fix: rename the container`}},
		{"template container", ValidateTemplateContainerName("stage-out", p.Child("name")), nil},
		{"stage-logs", ValidateDeferContainerName(StageLogsName, p.Child("name")),
			[]string{`spec.name: Forbidden: "stage-logs" is reserved for kdefer (the defer pod's built-in stage-logs container); fix: rename the container`}},
		{"defer container", ValidateDeferContainerName("notify", p.Child("name")), nil},
	}
	for _, tc := range cases {
		if diff := cmp.Diff(tc.want, msgs(tc.got)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}
