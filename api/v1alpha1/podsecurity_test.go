package v1alpha1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Defer containers run in the defer pod, which meets the Pod Security
// Standard "restricted": a policy may tighten a defer container's security
// context, never weaken it, and never hand it the stage credentials.
func TestValidateDeferContainerSecurity(t *testing.T) {
	creds := &corev1.LocalObjectReference{Name: "s3-creds"}
	cases := []struct {
		name string
		c    corev1.Container
		want []string // "field: type"
	}{
		{name: "nothing set: kdefer fills in restricted", c: corev1.Container{}},
		{name: "tightened and restricted-compatible", c: corev1.Container{SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptr(int64(1000)), RunAsNonRoot: ptr(true), AllowPrivilegeEscalation: ptr(false), Privileged: ptr(false),
			ReadOnlyRootFilesystem: ptr(false),
			Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}},
			SeccompProfile:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("p.json")},
			SELinuxOptions:         &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c1,c2"},
		}, Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "other"}, Key: "t"}}}}}},
		{name: "privileged", c: corev1.Container{SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)}},
			want: []string{"spec.deferContainers[0].securityContext.privileged: Forbidden"}},
		{name: "escalation", c: corev1.Container{SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(true)}},
			want: []string{"spec.deferContainers[0].securityContext.allowPrivilegeEscalation: Forbidden"}},
		{name: "root", c: corev1.Container{SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(0)), RunAsNonRoot: ptr(false)}},
			want: []string{"spec.deferContainers[0].securityContext.runAsNonRoot: Forbidden", "spec.deferContainers[0].securityContext.runAsUser: Forbidden"}},
		{name: "added capabilities", c: corev1.Container{SecurityContext: &corev1.SecurityContext{
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE", "SYS_ADMIN", "CAP_NET_RAW"}}}},
			want: []string{"spec.deferContainers[0].securityContext.capabilities.add[1]: Forbidden", "spec.deferContainers[0].securityContext.capabilities.add[2]: Forbidden"}},
		{name: "unconfined", c: corev1.Container{SecurityContext: &corev1.SecurityContext{
			SeccompProfile:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
			AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
			ProcMount:       ptr(corev1.UnmaskedProcMount),
			SELinuxOptions:  &corev1.SELinuxOptions{Type: "spc_t", User: "system_u"},
			WindowsOptions:  &corev1.WindowsSecurityContextOptions{HostProcess: ptr(true)},
		}}, want: []string{
			"spec.deferContainers[0].securityContext.seccompProfile.type: Forbidden",
			"spec.deferContainers[0].securityContext.appArmorProfile.type: Forbidden",
			"spec.deferContainers[0].securityContext.procMount: Forbidden",
			"spec.deferContainers[0].securityContext.seLinuxOptions.type: Forbidden",
			"spec.deferContainers[0].securityContext.seLinuxOptions.user: Forbidden",
			"spec.deferContainers[0].securityContext.windowsOptions.hostProcess: Forbidden",
		}},
		{name: "host port", c: corev1.Container{Ports: []corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 8080, HostPort: 8080}}},
			want: []string{"spec.deferContainers[0].ports[1].hostPort: Forbidden"}},
		{name: "stage credentials", c: corev1.Container{
			Env: []corev1.EnvVar{{Name: "A", Value: "x"}, {Name: "AWS_SECRET_ACCESS_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: *creds, Key: "AWS_SECRET_ACCESS_KEY"}}}},
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *creds}}},
		}, want: []string{"spec.deferContainers[0].env[1].valueFrom.secretKeyRef: Forbidden", "spec.deferContainers[0].envFrom[0].secretRef: Forbidden"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Name, tc.c.Image = "notify", "busybox"
			s := &DeferPolicySpec{StageOut: &StageOut{URL: "s3://b/{pod}/"}, Credentials: creds, DeferContainers: []corev1.Container{tc.c}}
			var got []string
			for _, e := range ValidateDeferPolicySpec(s, field.NewPath("spec")) {
				got = append(got, e.Field+": "+e.Type.String())
				if e.Type == field.ErrorTypeForbidden && !strings.Contains(e.Detail, "fix: ") {
					t.Errorf("%s: the message names no fix: %s", e.Field, e.Detail)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ValidateDeferPolicySpec (-want +got):\n%s", diff)
			}
		})
	}
}
