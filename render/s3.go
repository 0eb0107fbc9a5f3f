package render

import (
	"path"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// S3CABundleVolume is the name of the volume that holds a policy's
// spec.s3.caBundle, mounted into the stage steps only (stage-in here, the
// defer pod's stage-out in controller); a name kdefer reserves
// (v1.S3CABundleVolume).
const S3CABundleVolume = v1.S3CABundleVolume

// S3CABundle returns the volume of the policy's spec.s3.caBundle and its
// mount in a stage step, or nils when the policy names none. The key is
// projected to the file the rendered URLs name (v1.S3CABundleFile).
func S3CABundle(pol *v1.DeferPolicySpec) (*corev1.Volume, *corev1.VolumeMount) {
	if pol.S3 == nil || pol.S3.CABundle == nil {
		return nil, nil
	}
	ca := pol.S3.CABundle
	file := path.Base(v1.S3CABundleFile)
	// The mode the apiserver defaults, spelt out so that a rendered
	// template stays rendered once stored (IsRendered).
	mode := ptr(int32(corev1.SecretVolumeSourceDefaultMode))
	vol := &corev1.Volume{Name: S3CABundleVolume}
	switch {
	case ca.SecretKeyRef != nil:
		vol.Secret = &corev1.SecretVolumeSource{SecretName: ca.SecretKeyRef.Name, DefaultMode: mode,
			Items: []corev1.KeyToPath{{Key: ca.SecretKeyRef.Key, Path: file}}}
	case ca.ConfigMapKeyRef != nil:
		vol.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: ca.ConfigMapKeyRef.LocalObjectReference, DefaultMode: mode,
			Items: []corev1.KeyToPath{{Key: ca.ConfigMapKeyRef.Key, Path: file}}}
	default:
		return nil, nil // refused by validation
	}
	return vol, &corev1.VolumeMount{Name: S3CABundleVolume, MountPath: path.Dir(v1.S3CABundleFile), ReadOnly: true}
}

// withS3CABundle returns volumes with the policy's CA bundle volume in
// place of any rendered before (none when the policy has no stage-in or
// no bundle).
func withS3CABundle(volumes []corev1.Volume, pol *v1.DeferPolicySpec) []corev1.Volume {
	out := volumes[:0:0]
	for _, v := range volumes {
		if v.Name != S3CABundleVolume {
			out = append(out, v)
		}
	}
	if vol, _ := S3CABundle(pol); vol != nil && len(pol.StageIn) > 0 {
		out = append(out, *vol)
	}
	if len(out) == 0 {
		return volumes[:0] // keep nil vs empty as it was
	}
	return out
}
