package render_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	rt "github.com/kdefer/kdefer/render/testing"
)

// spec.s3 reaches the stage-in step as URL parameters, and its CA bundle is
// mounted there and in no container of the user's.
func TestRenderS3Settings(t *testing.T) {
	policy := &v1.DeferPolicySpec{
		StageOut: &v1.StageOut{URL: "s3://out/{pod}/"},
		StageIn:  []v1.StageIn{{URL: "s3://in/data/"}},
		S3: &v1.S3Settings{Checksum: v1.S3ChecksumNone, CABundle: &v1.CABundleSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "site-ca"}, Key: "ca.crt"}}},
	}
	job := rt.MakeJob("j", ns).Obj()
	job.Annotations = map[string]string{v1.AnnotationPolicy: "p"}
	out, err := render.Job(job, policy, opts)
	if err != nil {
		t.Fatal(err)
	}
	spec := out.Spec.Template.Spec
	var vol *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == render.S3CABundleVolume {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "site-ca" || vol.Secret.Items[0].Key != "ca.crt" {
		t.Fatalf("CA bundle volume %+v, want Secret site-ca key ca.crt", vol)
	}
	in := spec.InitContainers[0]
	if !strings.Contains(strings.Join(in.Args, " "), "s3://in/data/?ca_bundle=%2Fvar%2Frun%2Fkdefer%2Fs3-ca%2Fca.pem&checksum=none") {
		t.Errorf("stage-in args %q lack the policy's settings", in.Args)
	}
	mounted := false
	for _, m := range in.VolumeMounts {
		mounted = mounted || m.Name == render.S3CABundleVolume
	}
	if !mounted {
		t.Errorf("stage-in does not mount the CA bundle")
	}
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == render.S3CABundleVolume {
				t.Errorf("container %s mounts the CA bundle", c.Name)
			}
		}
	}
}

// stageIn[].allowUncommitted reaches its stage-in step as
// --allow-uncommitted, and only that one.
func TestRenderStageInAllowUncommitted(t *testing.T) {
	policy := &v1.DeferPolicySpec{
		StageOut: &v1.StageOut{URL: "s3://out/{pod}/"},
		StageIn:  []v1.StageIn{{URL: "s3://in/a/", Path: "a"}, {URL: "s3://in/b/", Path: "b", AllowUncommitted: true}},
	}
	job := rt.MakeJob("j", ns).Obj()
	job.Annotations = map[string]string{v1.AnnotationPolicy: "p"}
	out, err := render.Job(job, policy, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, c := range out.Spec.Template.Spec.InitContainers {
		got[c.Name] = slices.Contains(c.Args, "--allow-uncommitted")
	}
	if want := map[string]bool{render.StageInContainerName + "-0": false, render.StageInContainerName + "-1": true}; !maps.Equal(got, want) {
		t.Errorf("--allow-uncommitted per stage-in container: %v, want %v", got, want)
	}
}
