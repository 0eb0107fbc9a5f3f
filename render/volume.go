package render

import (
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// The work volume: the claim that replaces an emptyDir, and where a
// container mounts what.

// sizeFromEmptyDir keeps an emptyDir's sizeLimit as the claim's size unless
// the size was set explicitly.
func sizeFromEmptyDir(policy *v1.DeferPolicySpec, ann map[string]string, ed *corev1.EmptyDirVolumeSource) *resource.Quantity {
	if _, ok := ann[v1.AnnotationWorkSize]; ok {
		return nil
	}
	if policy != nil && policy.WorkVolume.Size != nil {
		return nil
	}
	if ed.SizeLimit != nil && ed.SizeLimit.Sign() > 0 {
		q := ed.SizeLimit.DeepCopy()
		return &q
	}
	return nil
}

func claimTemplate(pol v1.DeferPolicySpec, size *resource.Quantity) *corev1.PersistentVolumeClaimTemplate {
	wv := pol.WorkVolume
	if size == nil {
		size = wv.Size
	}
	t := &corev1.PersistentVolumeClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1.LabelWorkVolume: wv.Name}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: append([]corev1.PersistentVolumeAccessMode(nil), wv.AccessModes...),
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size.DeepCopy()}},
		},
	}
	if wv.StorageClassName != nil {
		sc := *wv.StorageClassName
		t.Spec.StorageClassName = &sc
	}
	return t
}

func mountsVolume(c *corev1.Container, name string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == name {
			return true
		}
	}
	return false
}

// mountAt returns the volume mounted at exactly p, or "".
func mountAt(c *corev1.Container, p string) string {
	p = path.Clean(p)
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) == p {
			return m.Name
		}
	}
	return ""
}

func volumeKind(v *corev1.Volume) string {
	s := v.VolumeSource
	switch {
	case s.HostPath != nil:
		return "hostPath"
	case s.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case s.ConfigMap != nil:
		return "configMap"
	case s.Secret != nil:
		return "secret"
	case s.Projected != nil:
		return "projected"
	case s.DownwardAPI != nil:
		return "downwardAPI"
	case s.NFS != nil:
		return "nfs"
	case s.CSI != nil:
		return "csi"
	case s.Image != nil:
		return "image"
	}
	return "non-emptyDir"
}
