package render

import (
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
)

// stageInContainer is a stage-in init container: kdefer-stage with the
// pod's identity in the stagecontract environment, the work volume and,
// alone among the pod's containers, the credentials (the Secret, or the
// web identity token).
func stageInContainer(name string, in v1.StageIn, pol v1.DeferPolicySpec, opts Options) corev1.Container {
	f := func(p string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: p}}
	}
	c := corev1.Container{
		Name:            name,
		Image:           opts.StageImage,
		ImagePullPolicy: opts.ImagePullPolicy,
		Args: []string{"in", "--from", v1.StageURLWithS3(in.URL, pol.S3),
			"--volume-root", StageMountPath, "--to", path.Join(StageMountPath, in.Path), "--log-format", "json"},
		Env: []corev1.EnvVar{
			{Name: stagecontract.EnvNamespace, ValueFrom: f("metadata.namespace")},
			{Name: stagecontract.EnvJob, ValueFrom: f("metadata.labels['" + JobNameLabel + "']")},
			{Name: stagecontract.EnvPod, ValueFrom: f("metadata.name")},
			{Name: stagecontract.EnvUID, ValueFrom: f("metadata.uid")},
			{Name: stagecontract.EnvNode, ValueFrom: f("spec.nodeName")},
			{Name: stagecontract.EnvIndex, ValueFrom: f("metadata.annotations['" + JobCompletionIndexAnnotation + "']")},
		},
		VolumeMounts:             []corev1.VolumeMount{{Name: pol.WorkVolume.Name, MountPath: StageMountPath}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		}},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			// Meets the restricted Pod Security Standard even when the pod
			// sets seccomp per container. The user is the pod's (or the
			// image's), so stage-in writes files the main containers own.
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	if in.AllowUncommitted {
		c.Args = append(c.Args, "--allow-uncommitted") // stagein.Options.AllowUncommitted
	}
	if _, m := S3CABundle(&pol); m != nil {
		c.VolumeMounts = append(c.VolumeMounts, *m)
	}
	if _, m, env := WebIdentity(&pol); m != nil {
		c.VolumeMounts = append(c.VolumeMounts, *m)
		c.Env = append(c.Env, env...)
	}
	if pol.Credentials != nil {
		c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *pol.Credentials}}}
	}
	return c
}

// ownFields returns old with the fields render sets taken from want: all
// that says what runs in the container and what it is given, since old may
// be anyone's (a template may claim to be rendered).
func ownFields(old, want corev1.Container) corev1.Container {
	c := *old.DeepCopy()
	c.Image, c.ImagePullPolicy = want.Image, want.ImagePullPolicy
	c.Command, c.Args = want.Command, want.Args
	c.Lifecycle = want.Lifecycle
	c.LivenessProbe, c.ReadinessProbe, c.StartupProbe = want.LivenessProbe, want.ReadinessProbe, want.StartupProbe
	c.Env, c.EnvFrom = want.Env, want.EnvFrom
	c.VolumeMounts = want.VolumeMounts
	c.TerminationMessagePolicy = want.TerminationMessagePolicy
	c.Resources = want.Resources
	c.SecurityContext = want.SecurityContext
	c.RestartPolicy = want.RestartPolicy
	return c
}

func ptr[T any](v T) *T { return &v }
