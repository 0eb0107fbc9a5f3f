package controller

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/stagecontract"
)

// A policy's identity reaches its defer pod: the pod runs as the policy's
// ServiceAccount with its image pull Secrets and no API token, and the web
// identity token, for the policy's audience, is mounted in kdefer's stage
// steps (stage-out, stage-logs) with the AWS SDK's environment, and in no
// defer container of the user's.
func TestDeferPodIdentity(t *testing.T) {
	opts := DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:test",
		Logs: LogsEndpoint{URL: "https://kdefer-webhook.kdefer-system.svc" + stagecontract.LogsPath, CA: func() []byte { return []byte("CA") }}}
	run := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
		p.ServiceAccountName = "stager"
		p.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
		p.WebIdentity = &v1.WebIdentity{ExpirationSeconds: new(int64(900)), S3: &v1.S3WebIdentity{RoleARN: "arn:aws:iam::1:role/r"}}
		p.DeferContainers = []corev1.Container{{Name: "notify", Image: "curl"}}
	}).Obj()
	pod := BuildDeferPod(run, opts)
	if pod.Spec.ServiceAccountName != "stager" {
		t.Errorf("serviceAccountName %q, want the policy's stager", pod.Spec.ServiceAccountName)
	}
	if !slices.Equal(pod.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
		t.Errorf("imagePullSecrets %v, want regcred", pod.Spec.ImagePullSecrets)
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("automountServiceAccountToken %v, want false", a)
	}
	var tok *corev1.ServiceAccountTokenProjection
	for _, v := range pod.Spec.Volumes {
		if v.Name == render.WebIdentityVolume && v.Projected != nil && len(v.Projected.Sources) == 1 {
			tok = v.Projected.Sources[0].ServiceAccountToken
		}
	}
	if tok == nil || tok.Audience != v1.DefaultS3Audience || tok.ExpirationSeconds == nil || *tok.ExpirationSeconds != 900 {
		t.Fatalf("token projection %+v, want audience %s for 900s", tok, v1.DefaultS3Audience)
	}
	seen := map[string]bool{}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		mounts := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == render.WebIdentityVolume })
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		kdefers := c.Name == v1.StageOutStepName || c.Name == v1.StageLogsName
		switch {
		case kdefers && (!mounts || env["AWS_WEB_IDENTITY_TOKEN_FILE"] != v1.WebIdentityTokenFile || env["AWS_ROLE_ARN"] != "arn:aws:iam::1:role/r"):
			t.Errorf("%s: token mounted %v, env %v: want the token and AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN", c.Name, mounts, env)
		case !kdefers && (mounts || env["AWS_WEB_IDENTITY_TOKEN_FILE"] != "" || env["AWS_ROLE_ARN"] != ""):
			t.Errorf("defer container %s gets the token (mounted %v) or its environment", c.Name, mounts)
		}
		seen[c.Name] = true
	}
	if !seen[v1.StageOutStepName] || !seen[v1.StageLogsName] || !seen["notify"] {
		t.Errorf("containers %v, want stage-out, stage-logs and notify", seen)
	}
	// Without a web identity, no token volume; without a ServiceAccount,
	// the namespace's default (named, for the logs token's check).
	run = kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Obj()
	pod = BuildDeferPod(run, opts)
	if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == render.WebIdentityVolume }) {
		t.Errorf("a policy without webIdentity got the token volume")
	}
	if pod.Spec.ServiceAccountName != "default" || len(pod.Spec.ImagePullSecrets) != 0 {
		t.Errorf("serviceAccountName %q, imagePullSecrets %v: want default and none", pod.Spec.ServiceAccountName, pod.Spec.ImagePullSecrets)
	}
}

// The pre-pull pod pulls with the policy's image pull Secrets.
func TestPrePullPodPullSecrets(t *testing.T) {
	run := kt.MakeRun("p", "ns").Policy(func(p *v1.DeferPolicySpec) {
		p.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	}).Obj()
	pod := BuildPrePullPod(run, "n1", "kdefer.io/kdefer-stage:test", corev1.PullIfNotPresent)
	if !slices.Equal(pod.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
		t.Errorf("imagePullSecrets %v, want regcred", pod.Spec.ImagePullSecrets)
	}
}
