package render_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
)

// podFromTemplate is the pod the Job controller makes from job's template:
// the template's metadata and spec, the Job as its controller, and its
// completion index if the Job is Indexed. extraAnn are annotations to add (a
// Job's kdefer annotations, which a rendered template already carries).
func podFromTemplate(job *batchv1.Job, extraAnn map[string]string) *corev1.Pod {
	tmpl := job.Spec.Template
	p := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	p.Name, p.Namespace = job.Name+"-x", ns
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: "job-uid", Controller: ptr(true)}}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	if job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion {
		p.Annotations[render.JobCompletionIndexAnnotation] = "0"
	}
	for k, v := range extraAnn {
		if strings.HasPrefix(k, v1.AnnotationPrefix) {
			p.Annotations[k] = v
		}
	}
	return p
}

// TestRenderPodAsJob: a pod of a Job whose template kdefer did not render
// (only the pod opted in) is rendered to what the pods of the same Job
// rendered as a Job are (so it gets the same defer runs), and rendering it
// again changes nothing.
func TestRenderPodAsJob(t *testing.T) {
	for _, tc := range shapes {
		t.Run(tc.name, func(t *testing.T) {
			job, err := render.Job(tc.job, tc.policy, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := podFromTemplate(job, nil)
			pod := podFromTemplate(tc.job, tc.job.Annotations)
			orig := pod.DeepCopy()
			got, err := render.Pod(pod, tc.policy, opts)
			if err != nil {
				t.Fatalf("render.Pod: %v", err)
			}
			if diff := cmp.Diff(orig, pod); diff != "" {
				t.Fatalf("render.Pod changed its input (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("rendered pod differs from the rendered Job's pod (-job's +pod's):\n%s", diff)
			}
			if !render.IsRenderedPod(got) || render.IsRenderedPod(pod) {
				t.Errorf("IsRenderedPod: rendered %v, unrendered %v", render.IsRenderedPod(got), render.IsRenderedPod(pod))
			}
			again, err := render.Pod(got, tc.policy, opts)
			if err != nil {
				t.Fatalf("rendering the rendered pod: %v", err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("render.Pod is not idempotent (-once +twice):\n%s", diff)
			}
		})
	}
}

// ciPod is a CI runner's build pod: a build container and a helper, a
// builds emptyDir, restartPolicy Never, and kdefer's annotations as the
// runner's configuration adds them.
func ciPod(ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "runner-abc-project-1-concurrent-0-", Namespace: ns,
			Labels: map[string]string{v1.LabelEnabled: "true"}, Annotations: ann},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{
				{Name: "build", Image: "golang:1.26", VolumeMounts: []corev1.VolumeMount{{Name: "repo", MountPath: "/builds"}}},
				{Name: "helper", Image: "gitlab-runner-helper", VolumeMounts: []corev1.VolumeMount{{Name: "repo", MountPath: "/builds"}}},
			},
			Volumes: []corev1.Volume{{Name: "repo", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

func TestRenderCIPod(t *testing.T) {
	pod := ciPod(map[string]string{v1.AnnotationStageOut: "s3://ci/{namespace}/{pod}/{uid}/", v1.AnnotationWorkVolume: "repo"})
	got, err := render.Pod(pod, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[v1.LabelManaged] != "true" || len(got.Finalizers) != 1 || got.Finalizers[0] != v1.PodFinalizer {
		t.Errorf("identity: labels %v finalizers %v", got.Labels, got.Finalizers)
	}
	e := got.Spec.Volumes[0].Ephemeral
	if e == nil || e.VolumeClaimTemplate.Labels[v1.LabelWorkVolume] != "repo" {
		t.Errorf("builds volume not retained: %+v", got.Spec.Volumes[0])
	}
	for _, c := range got.Spec.Containers {
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/builds" {
			t.Errorf("container %s mounts %+v, want /builds only", c.Name, c.VolumeMounts)
		}
	}
}

func TestRenderPodRefuses(t *testing.T) {
	ownedBy := func(p *corev1.Pod, apiVersion, kind string) *corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "o", UID: "u", Controller: ptr(true)}}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want []string // "" : accepted
	}{
		{name: "job without a Job", pod: ciPod(map[string]string{v1.AnnotationStageOut: "s3://b/{job}/{pod}/"}),
			want: []string{"annotation kdefer.io/stage-out: uses {job}, but the pod belongs to no Job, so it would be empty; fix: use {pod} or {uid} instead of {job}"}},
		{name: "job with an unknown owner", pod: ownedBy(ciPod(map[string]string{v1.AnnotationStageOut: "s3://b/{job}/"}), "tekton.dev/v1", "TaskRun"),
			want: []string{"uses {job}, but the pod belongs to no Job"}},
		{name: "index without an index", pod: ciPod(map[string]string{v1.AnnotationStageOut: "s3://b/{pod}/", v1.AnnotationStageIn: "s3://in/{index}/"}),
			want: []string{"annotation kdefer.io/stage-in: uses {index}, but the pod is not a pod of an Indexed Job"}},
		{name: "job and index of a Job's pod", pod: func() *corev1.Pod {
			p := ownedBy(ciPod(map[string]string{v1.AnnotationStageOut: "s3://b/{job}/{index}/"}), "batch/v1", "Job")
			p.Annotations[render.JobCompletionIndexAnnotation] = "3"
			return p
		}()},
		{name: "restartPolicy Always", pod: func() *corev1.Pod {
			p := ciPod(map[string]string{v1.AnnotationStageOut: "s3://b/{pod}/"})
			p.Spec.RestartPolicy = ""
			return p
		}(), want: []string{`spec.restartPolicy: is "Always"`, "fix: set restartPolicy: Never"}},
		{name: "field paths are the pod's", pod: func() *corev1.Pod {
			p := ciPod(map[string]string{v1.AnnotationStageOut: "s3://b/{pod}/", v1.AnnotationCredentials: "s3"})
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s3"}}}}
			return p
		}(), want: []string{`spec.containers[0] (build).envFrom: receives the credentials Secret "s3"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render.Pod(tc.pod, nil, opts)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
