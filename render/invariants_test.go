package render_test

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
)

// simulateDefaults sets fields the apiserver defaults on a Job's template.
func simulateDefaults(j *batchv1.Job) {
	spec := &j.Spec.Template.Spec
	spec.DNSPolicy = corev1.DNSClusterFirst
	spec.SchedulerName = corev1.DefaultSchedulerName
	spec.SecurityContext = &corev1.PodSecurityContext{}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].TerminationMessagePath = corev1.TerminationMessagePathDefault
			if cs[i].ImagePullPolicy == "" {
				cs[i].ImagePullPolicy = corev1.PullIfNotPresent
			}
			if cs[i].TerminationMessagePolicy == "" {
				cs[i].TerminationMessagePolicy = corev1.TerminationMessageReadFile
			}
		}
	}
	mode := int32(corev1.SecretVolumeSourceDefaultMode)
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if e := v.Ephemeral; e != nil {
			fs := corev1.PersistentVolumeFilesystem
			e.VolumeClaimTemplate.Spec.VolumeMode = &fs
		}
		if v.Secret != nil && v.Secret.DefaultMode == nil {
			v.Secret.DefaultMode = &mode
		}
		if v.ConfigMap != nil && v.ConfigMap.DefaultMode == nil {
			v.ConfigMap.DefaultMode = &mode
		}
		if v.Projected != nil && v.Projected.DefaultMode == nil {
			v.Projected.DefaultMode = &mode
		}
	}
	// The v1 conversion copies the ServiceAccount's name to its deprecated alias.
	if spec.ServiceAccountName != "" {
		spec.DeprecatedServiceAccount = spec.ServiceAccountName
	}
}

// unrender removes exactly what render may add, restoring the work volume
// from the original, so that what remains must equal the original.
func unrender(t *testing.T, rendered, orig *batchv1.Job) *batchv1.Job {
	t.Helper()
	j := rendered.DeepCopy()
	tmpl := &j.Spec.Template
	otmpl := &orig.Spec.Template
	if _, ok := otmpl.Labels[v1.LabelManaged]; !ok {
		delete(tmpl.Labels, v1.LabelManaged)
	}
	if len(tmpl.Labels) == 0 && otmpl.Labels == nil {
		tmpl.Labels = nil
	}
	var fin []string
	for _, f := range tmpl.Finalizers {
		if f != v1.PodFinalizer {
			fin = append(fin, f)
		}
	}
	tmpl.Finalizers = fin
	for k := range tmpl.Annotations {
		if _, ok := otmpl.Annotations[k]; !ok && strings.HasPrefix(k, v1.AnnotationPrefix) {
			if orig.Annotations[k] != tmpl.Annotations[k] && k != v1.AnnotationRendered {
				t.Errorf("template annotation %s=%q is neither the Job's nor the template's", k, tmpl.Annotations[k])
			}
			delete(tmpl.Annotations, k)
		}
	}
	if len(tmpl.Annotations) == 0 && otmpl.Annotations == nil {
		tmpl.Annotations = nil
	}
	var initc []corev1.Container
	for _, c := range tmpl.Spec.InitContainers {
		if !strings.HasPrefix(c.Name, render.StageInContainerName) {
			initc = append(initc, c)
		}
	}
	tmpl.Spec.InitContainers = initc
	origVols := map[string]corev1.Volume{}
	for _, v := range otmpl.Spec.Volumes {
		origVols[v.Name] = v
	}
	var vols []corev1.Volume
	added := map[string]bool{}
	for _, v := range tmpl.Spec.Volumes {
		if ov, ok := origVols[v.Name]; ok {
			if v.Ephemeral != nil && ov.Ephemeral == nil && ov.EmptyDir == nil {
				t.Errorf("volume %s of another kind was converted", v.Name)
			}
			if ov.Ephemeral != nil || ov.EmptyDir != nil {
				v = ov
			}
			vols = append(vols, v)
		} else {
			added[v.Name] = true
		}
	}
	tmpl.Spec.Volumes = vols
	// The policy's identity, for its stage-in: a ServiceAccount where the
	// template named none, image pull Secrets besides the template's.
	if otmpl.Spec.ServiceAccountName == "" {
		tmpl.Spec.ServiceAccountName = ""
	}
	var pulls []corev1.LocalObjectReference
	for _, p := range tmpl.Spec.ImagePullSecrets {
		if slices.Contains(otmpl.Spec.ImagePullSecrets, p) {
			pulls = append(pulls, p)
		}
	}
	tmpl.Spec.ImagePullSecrets = pulls
	for i := range tmpl.Spec.Containers {
		var ms []corev1.VolumeMount
		for _, m := range tmpl.Spec.Containers[i].VolumeMounts {
			if !added[m.Name] {
				ms = append(ms, m)
			}
		}
		tmpl.Spec.Containers[i].VolumeMounts = ms
	}
	return j
}

func checkInvariants(t *testing.T, j *batchv1.Job, policy *v1.DeferPolicySpec) {
	t.Helper()
	tmpl := j.Spec.Template
	if tmpl.Labels[v1.LabelManaged] != "true" {
		t.Errorf("template lacks %s", v1.LabelManaged)
	}
	found := false
	for _, f := range tmpl.Finalizers {
		found = found || f == v1.PodFinalizer
	}
	if !found {
		t.Errorf("template lacks finalizer %s", v1.PodFinalizer)
	}
	pol, err := render.EffectivePolicy(policy, tmpl.Annotations)
	if err != nil {
		t.Fatalf("effective policy from the pod template alone: %v", err)
	}
	var work *corev1.Volume
	for i := range tmpl.Spec.Volumes {
		if tmpl.Spec.Volumes[i].Name == pol.WorkVolume.Name {
			work = &tmpl.Spec.Volumes[i]
		}
	}
	if work == nil || work.Ephemeral == nil || work.Ephemeral.VolumeClaimTemplate.Labels[v1.LabelWorkVolume] != pol.WorkVolume.Name {
		t.Errorf("work volume %q is not a labelled generic ephemeral volume: %+v", pol.WorkVolume.Name, work)
	}
	// Main containers never receive credentials; stage-in does.
	if pol.Credentials != nil {
		secret := pol.Credentials.Name
		for _, c := range append(append([]corev1.Container{}, tmpl.Spec.Containers...), tmpl.Spec.InitContainers...) {
			stage := strings.HasPrefix(c.Name, render.StageInContainerName)
			got := false
			for _, e := range c.EnvFrom {
				got = got || (e.SecretRef != nil && e.SecretRef.Name == secret)
			}
			for _, e := range c.Env {
				got = got || (e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret)
			}
			if got != stage {
				t.Errorf("container %s: receives credentials = %v, want %v", c.Name, got, stage)
			}
		}
	}
	// Stage-in containers come first, one per source.
	for i := range pol.StageIn {
		if i >= len(tmpl.Spec.InitContainers) || !strings.HasPrefix(tmpl.Spec.InitContainers[i].Name, render.StageInContainerName) {
			t.Errorf("init container %d is not a stage-in container", i)
		}
	}
}
