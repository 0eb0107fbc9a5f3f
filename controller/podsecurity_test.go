package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// TestDeferPodMeetsRestricted checks every pod kdefer builds with the Pod
// Security admission's own evaluator (the code the apiserver runs, at the
// newest level version): defer pods and pre-pull pods meet "restricted"
// whoever the Job runs as and whatever a stored policy holds (one saved
// before admission refused weakened defer containers), and no step but
// stage-out receives the stage credentials.
func TestDeferPodMeetsRestricted(t *testing.T) {
	eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	check := func(t *testing.T, pod *corev1.Pod) {
		t.Helper()
		for _, r := range eval.EvaluatePod(restricted, &pod.ObjectMeta, &pod.Spec) {
			if !r.Allowed {
				t.Errorf("pod %s violates restricted: %s (%s)", pod.Name, r.ForbiddenReason, r.ForbiddenDetail)
			}
		}
	}
	creds := corev1.LocalObjectReference{Name: "s3-creds"}
	credsKey := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: creds, Key: "AWS_SECRET_ACCESS_KEY"}}
	weakened := corev1.Container{Name: "weak", Image: "x",
		Ports:   []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}},
		Env:     []corev1.EnvVar{{Name: "KEEP", Value: "1"}, {Name: "AWS_SECRET_ACCESS_KEY", ValueFrom: credsKey}},
		EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: creds}}},
		SecurityContext: &corev1.SecurityContext{
			Privileged: ptr.To(true), AllowPrivilegeEscalation: ptr.To(true), RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false),
			Capabilities:    &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN", "NET_BIND_SERVICE"}, Drop: []corev1.Capability{"NET_RAW"}},
			SeccompProfile:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
			AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
			ProcMount:       ptr.To(corev1.UnmaskedProcMount),
			SELinuxOptions:  &corev1.SELinuxOptions{Type: "spc_t", User: "system_u"},
			WindowsOptions:  &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)},
		}}
	tightened := corev1.Container{Name: "tight", Image: "x", SecurityContext: &corev1.SecurityContext{
		RunAsUser: ptr.To[int64](1000), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}}}
	withCreds := func(p *v1.DeferPolicySpec) { p.Credentials = &creds }
	cases := map[string]*v1.DeferRun{
		"stage-out as 65532: the Job runs as root or its user is unknown": kt.MakeRun("root", "ns").Trigger(v1.TriggerFailed, 1).Policy(withCreds).Obj(),
		"stage-out as the Job's user": kt.MakeRun("user", "ns").Trigger(v1.TriggerSucceeded, 0).Policy(withCreds).
			StageUser(&v1.StageUser{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), SupplementalGroups: []int64{2000}}).Obj(),
		"stage user root, recorded by hand": kt.MakeRun("uid0", "ns").Trigger(v1.TriggerSucceeded, 0).
			StageUser(&v1.StageUser{RunAsUser: ptr.To[int64](0), RunAsGroup: ptr.To[int64](0)}).Obj(),
		"defer containers as written, tightened and weakened": kt.MakeRun("hooks", "ns").Trigger(v1.TriggerFailed, 2).Policy(func(p *v1.DeferPolicySpec) {
			withCreds(p)
			p.DeferContainers = []corev1.Container{{Name: "plain", Image: "x"}, tightened, weakened}
		}).Obj(),
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			pod := BuildDeferPod(run, DeferPodOptions{StageImage: "img"})
			check(t, pod)
			for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
				if c.Name == v1.StageOutStepName {
					if c.SecurityContext.RunAsUser != nil && *c.SecurityContext.RunAsUser == 0 {
						t.Errorf("stage-out runs as root")
					}
					continue
				}
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == creds.Name {
						t.Errorf("defer container %s receives the stage credentials in env %s", c.Name, e.Name)
					}
				}
				if len(c.EnvFrom) > 0 {
					t.Errorf("defer container %s gets envFrom %v", c.Name, c.EnvFrom)
				}
			}
		})
	}
	t.Run("a Job running as root is still staged out, as 65532", func(t *testing.T) {
		run := cases["stage-out as 65532: the Job runs as root or its user is unknown"]
		if got := StageUID(run); got != deferPodUser {
			t.Errorf("StageUID = %d, want %d", got, deferPodUser)
		}
		steps := Steps(run, DeferPodOptions{StageImage: "img"})
		if len(steps) == 0 || steps[0].Name != v1.StageOutStepName {
			t.Fatalf("steps %v: want stage-out first", steps)
		}
	})
	t.Run("the tightened defer container keeps its settings", func(t *testing.T) {
		pod := BuildDeferPod(cases["defer containers as written, tightened and weakened"], DeferPodOptions{StageImage: "img"})
		for _, c := range pod.Spec.InitContainers {
			if c.Name != "tight" {
				continue
			}
			sc := c.SecurityContext
			if *sc.RunAsUser != 1000 || sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost || len(sc.Capabilities.Add) != 1 {
				t.Errorf("tightened container's security context changed: %+v", sc)
			}
		}
	})
	t.Run("pre-pull pod", func(t *testing.T) {
		check(t, BuildPrePullPod(cases["stage-out as the Job's user"], "n1", "img", ""))
	})
}
