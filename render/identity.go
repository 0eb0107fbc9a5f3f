package render

import (
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// WebIdentityVolume is the name of the volume that holds a policy's
// spec.webIdentity token, mounted into the stage steps only (stage-in
// here, the defer pod's stage-out and stage-logs in controller); a name
// kdefer reserves (v1.WebIdentityVolume).
const WebIdentityVolume = v1.WebIdentityVolume

// WebIdentity returns the projected token volume of the policy's
// spec.webIdentity, its mount in a stage step, and the environment that
// tells the store's SDK to exchange it (the variables the AWS and Azure
// SDKs read for IRSA and workload identity); nils when the policy has none.
//
// The token names the ServiceAccount of the pod it is projected into, is
// bound to that pod (the apiserver refuses it once the pod is gone), and
// carries the audience of the store's identity provider, which the
// apiserver itself refuses: it opens nothing in the cluster. Only kdefer's
// stage steps mount it; the volume is the pod's, but a container that does
// not mount it cannot read it, and admission refuses a user's container
// that mounts a volume of this name (v1.ValidateVolumeMounts).
func WebIdentity(pol *v1.DeferPolicySpec) (*corev1.Volume, *corev1.VolumeMount, []corev1.EnvVar) {
	w := pol.WebIdentity
	if w == nil {
		return nil, nil, nil
	}
	exp := w.TokenExpirationSeconds()
	vol := &corev1.Volume{Name: WebIdentityVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: w.TokenAudience(), ExpirationSeconds: &exp, Path: path.Base(v1.WebIdentityTokenFile),
		}}},
		// The default mode (0644), spelt out as the apiserver defaults it,
		// so that a rendered template stays rendered once stored
		// (IsRendered): the stage steps run as the main containers' user
		// or the defer pod's, and no other container mounts the volume.
		DefaultMode: ptr(int32(corev1.ProjectedVolumeSourceDefaultMode)),
	}}}
	mount := &corev1.VolumeMount{Name: WebIdentityVolume, MountPath: path.Dir(v1.WebIdentityTokenFile), ReadOnly: true}
	var env []corev1.EnvVar
	if s := w.S3; s != nil {
		env = append(env,
			corev1.EnvVar{Name: "AWS_WEB_IDENTITY_TOKEN_FILE", Value: v1.WebIdentityTokenFile},
			corev1.EnvVar{Name: "AWS_ROLE_ARN", Value: s.RoleARN})
		if s.STSEndpoint != "" {
			env = append(env, corev1.EnvVar{Name: "AWS_ENDPOINT_URL_STS", Value: s.STSEndpoint})
		}
	}
	if a := w.Azure; a != nil {
		env = append(env,
			corev1.EnvVar{Name: "AZURE_FEDERATED_TOKEN_FILE", Value: v1.WebIdentityTokenFile},
			corev1.EnvVar{Name: "AZURE_CLIENT_ID", Value: a.ClientID},
			corev1.EnvVar{Name: "AZURE_TENANT_ID", Value: a.TenantID})
	}
	return vol, mount, env
}

// withWebIdentity returns volumes with the policy's web identity token
// volume in place of any rendered before (none when the policy has no
// stage-in or no web identity).
func withWebIdentity(volumes []corev1.Volume, pol *v1.DeferPolicySpec) []corev1.Volume {
	out := slices.DeleteFunc(slices.Clone(volumes), func(v corev1.Volume) bool { return v.Name == WebIdentityVolume })
	if vol, _, _ := WebIdentity(pol); vol != nil && len(pol.StageIn) > 0 {
		out = append(out, *vol)
	}
	if len(out) == 0 {
		return volumes[:0] // keep nil vs empty as it was
	}
	return out
}

// withIdentity gives a template whose policy stages in the policy's
// identity: with a web identity, its ServiceAccount when the template names
// none, so that the stage-in token names the ServiceAccount the defer pods
// run as; and its image pull Secrets (for the stage image) besides the
// template's own. Not the ServiceAccount without a web identity: an
// identity the platform gives by ServiceAccount alone (GKE's metadata
// server) reaches every container of the pod, the main containers too.
func withIdentity(spec *corev1.PodSpec, pol *v1.DeferPolicySpec) {
	if len(pol.StageIn) == 0 {
		return
	}
	if pol.WebIdentity != nil && pol.ServiceAccountName != "" && spec.ServiceAccountName == "" && spec.DeprecatedServiceAccount == "" {
		spec.ServiceAccountName = pol.ServiceAccountName
	}
	for _, s := range pol.ImagePullSecrets {
		if !slices.Contains(spec.ImagePullSecrets, s) {
			spec.ImagePullSecrets = append(spec.ImagePullSecrets, s)
		}
	}
}
