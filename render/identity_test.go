package render_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	rt "github.com/kdefer/kdefer/render/testing"
)

// identityPolicy stages in and out with a web identity for S3.
func identityPolicy() *v1.DeferPolicySpec {
	return &v1.DeferPolicySpec{
		StageOut:           &v1.StageOut{URL: "s3://out/{pod}/"},
		StageIn:            []v1.StageIn{{URL: "s3://in/data/"}},
		ServiceAccountName: "stager",
		ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "regcred"}},
		WebIdentity: &v1.WebIdentity{Audience: "minio-sts", S3: &v1.S3WebIdentity{
			RoleARN: "arn:minio:iam:::role/x", STSEndpoint: "http://10.88.0.1:9000"}},
	}
}

// spec.webIdentity's token is projected for its audience and mounted in
// the stage-in container alone, with the environment the AWS SDKs read;
// the template takes the policy's ServiceAccount (it names none) and
// image pull Secret.
func TestRenderWebIdentity(t *testing.T) {
	job := rt.MakeJob("j", ns).Obj()
	job.Annotations = map[string]string{v1.AnnotationPolicy: "p"}
	job.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox"}}
	out, err := render.Job(job, identityPolicy(), opts)
	if err != nil {
		t.Fatal(err)
	}
	spec := out.Spec.Template.Spec
	if spec.ServiceAccountName != "stager" {
		t.Errorf("serviceAccountName %q, want the policy's stager", spec.ServiceAccountName)
	}
	if !slices.Equal(spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
		t.Errorf("imagePullSecrets %v, want the policy's regcred", spec.ImagePullSecrets)
	}
	var vol *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == render.WebIdentityVolume {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil || vol.Projected == nil || len(vol.Projected.Sources) != 1 {
		t.Fatalf("web identity volume %+v, want one projected token", vol)
	}
	tok := vol.Projected.Sources[0].ServiceAccountToken
	if tok == nil || tok.Audience != "minio-sts" || tok.ExpirationSeconds == nil || *tok.ExpirationSeconds != v1.DefaultWebIdentityExpirationSeconds {
		t.Errorf("token projection %+v, want audience minio-sts for %ds", tok, v1.DefaultWebIdentityExpirationSeconds)
	}
	env := map[string]string{}
	mounted := false
	for _, c := range spec.InitContainers {
		if c.Name != render.StageInContainerName {
			continue
		}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		for _, m := range c.VolumeMounts {
			mounted = mounted || m.Name == render.WebIdentityVolume
		}
	}
	if !mounted {
		t.Errorf("stage-in does not mount the token")
	}
	for k, want := range map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": v1.WebIdentityTokenFile,
		"AWS_ROLE_ARN": "arn:minio:iam:::role/x", "AWS_ENDPOINT_URL_STS": "http://10.88.0.1:9000"} {
		if env[k] != want {
			t.Errorf("stage-in %s=%q, want %q", k, env[k], want)
		}
	}
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for _, c := range cs {
			if c.Name == render.StageInContainerName {
				continue
			}
			for _, m := range c.VolumeMounts {
				if m.Name == render.WebIdentityVolume {
					t.Errorf("container %s mounts the token", c.Name)
				}
			}
			for _, e := range c.Env {
				if e.Name == "AWS_WEB_IDENTITY_TOKEN_FILE" || e.Name == "AWS_ROLE_ARN" {
					t.Errorf("container %s gets %s", c.Name, e.Name)
				}
			}
		}
	}
	// Rendered again, the same: the volume is render's own.
	again, err := render.Job(out, identityPolicy(), opts)
	if err != nil {
		t.Fatalf("re-render: %v", err)
	}
	n := 0
	for _, v := range again.Spec.Template.Spec.Volumes {
		if v.Name == render.WebIdentityVolume {
			n++
		}
	}
	if n != 1 || len(again.Spec.Template.Spec.ImagePullSecrets) != 1 {
		t.Errorf("re-rendered: %d token volumes and pull Secrets %v, want one each", n, again.Spec.Template.Spec.ImagePullSecrets)
	}
}

// A Job that names its own ServiceAccount keeps it: its stage-in token
// names that one. A template that brings its own volume of the token's
// name, or mounts it in a container of the user's, is refused.
func TestRenderWebIdentityJobsOwn(t *testing.T) {
	job := rt.MakeJob("j", ns).Obj()
	job.Annotations = map[string]string{v1.AnnotationPolicy: "p"}
	job.Spec.Template.Spec.ServiceAccountName = "jobs-own"
	out, err := render.Job(job, identityPolicy(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if sa := out.Spec.Template.Spec.ServiceAccountName; sa != "jobs-own" {
		t.Errorf("serviceAccountName %q, want the Job's jobs-own", sa)
	}
	job = rt.MakeJob("j", ns).Obj()
	job.Annotations = map[string]string{v1.AnnotationPolicy: "p"}
	job.Spec.Template.Spec.Volumes = append(job.Spec.Template.Spec.Volumes, corev1.Volume{Name: render.WebIdentityVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	job.Spec.Template.Spec.Containers[0].VolumeMounts = append(job.Spec.Template.Spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: render.WebIdentityVolume, MountPath: "/token"})
	if _, err := render.Job(job, identityPolicy(), opts); err == nil {
		t.Errorf("a template with its own %s volume mounted in its main container was rendered", render.WebIdentityVolume)
	} else {
		t.Logf("refused: %v", err)
	}
}

// Without a web identity the template keeps the namespace's default
// ServiceAccount: an identity given by ServiceAccount alone (GKE's metadata
// server) would reach its main containers.
func TestRenderServiceAccountOnlyWithWebIdentity(t *testing.T) {
	job := rt.MakeJob("j", ns).Obj()
	job.Annotations = map[string]string{v1.AnnotationPolicy: "p"}
	pol := identityPolicy()
	pol.WebIdentity = nil
	out, err := render.Job(job, pol, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sa := out.Spec.Template.Spec.ServiceAccountName; sa != "" {
		t.Errorf("serviceAccountName %q, want none without webIdentity", sa)
	}
}
