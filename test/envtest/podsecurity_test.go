package envtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/render"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/test/envtest"
)

// TestPodSecurityRestricted: the apiserver's own Pod Security admission, in
// a namespace labelled pod-security.kubernetes.io/enforce=restricted, admits
// every pod kdefer makes (defer pods whoever the Job runs as and whatever
// the stored policy's defer containers ask for, pre-pull pods, the stage-in
// containers render adds to a restricted Job) and refuses a weakened one.
func TestPodSecurityRestricted(t *testing.T) {
	env := envtest.Start(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restricted", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	opts := controller.DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:test"}
	creds := corev1.LocalObjectReference{Name: "s3-creds"}
	withCreds := func(p *v1.DeferPolicySpec) { p.Credentials = &creds }
	logsOpts := opts
	logsOpts.Logs = controller.LogsEndpoint{URL: "https://kdefer-webhook.kdefer-system.svc/kdefer/v1/logs", CA: func() []byte { return []byte("CA") }}
	// The logs token names the pod's service account, which must exist.
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}); err != nil {
		t.Fatal(err)
	}

	// First a weakened defer pod (root, SYS_ADMIN): refused (which also waits until the
	// namespace's labels are enforced).
	weak := controller.BuildDeferPod(kt.MakeRun("weak", ns.Name).Trigger(v1.TriggerFailed, 1).Obj(), opts)
	wsc := weak.Spec.Containers[0].SecurityContext
	wsc.RunAsNonRoot, wsc.RunAsUser = ptr(false), ptr(int64(0))
	wsc.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := env.Client.Create(ctx, weak.DeepCopy(), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), `violates PodSecurity "restricted:latest"`) {
			wantDenied(t, err, "runAsUser=0", `"SYS_ADMIN"`)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a root defer pod with SYS_ADMIN in a restricted namespace: %v, want refused by Pod Security", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	stored := corev1.Container{Name: "stored", Image: "x", // saved before admission refused it
		Env:             []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: creds, Key: "k"}}}},
		Ports:           []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}},
		SecurityContext: &corev1.SecurityContext{Privileged: ptr(true), RunAsUser: ptr(int64(0)), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}}
	pods := map[string]*corev1.Pod{
		"defer pod, root Job (stage-out as 65532)": controller.BuildDeferPod(kt.MakeRun("root", ns.Name).Trigger(v1.TriggerFailed, 1).Policy(withCreds).Obj(), opts),
		"defer pod, stage-out as the Job's user": controller.BuildDeferPod(kt.MakeRun("user", ns.Name).Trigger(v1.TriggerSucceeded, 0).Policy(withCreds).
			StageUser(&v1.StageUser{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1000)), SupplementalGroups: []int64{2000}}).Obj(), opts),
		"defer pod with defer containers": controller.BuildDeferPod(kt.MakeRun("hooks", ns.Name).Trigger(v1.TriggerFailed, 2).Policy(func(p *v1.DeferPolicySpec) {
			withCreds(p)
			p.DeferContainers = []corev1.Container{{Name: "plain", Image: "x"}, stored,
				{Name: "tight", Image: "x", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(1000)), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}}}
		}).Obj(), opts),
		"defer pod, a defer container adding NET_BIND_SERVICE": controller.BuildDeferPod(kt.MakeRun("bind", ns.Name).Trigger(v1.TriggerFailed, 2).Policy(func(p *v1.DeferPolicySpec) {
			p.DeferContainers = []corev1.Container{{Name: "serve", Image: "x", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}}}
		}).Obj(), opts),
		// With logs on: the stage step's token and the stage-logs sidecar.
		"defer pod with logs and defer containers (stage-logs sidecar)": controller.BuildDeferPod(kt.MakeRun("logs", ns.Name).Trigger(v1.TriggerFailed, 2).Policy(func(p *v1.DeferPolicySpec) {
			withCreds(p)
			p.DeferContainers = []corev1.Container{{Name: "notify", Image: "x"}, {Name: "last", Image: "x"}}
		}).Obj(), logsOpts),
		"pre-pull pod": controller.BuildPrePullPod(kt.MakeRun("pull", ns.Name).Obj(), "n1", opts.StageImage, ""),
	}
	// A restricted Job, rendered with stage-in: its pod is admitted too.
	job := rt.MakeJob("sim", ns.Name).StageOut("s3://b/{pod}/").Annotation(v1.AnnotationStageIn, "s3://in/").Annotation(v1.AnnotationCredentials, creds.Name).Obj()
	job.Spec.Template.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(1000)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	job.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	rendered, err := render.Job(job, nil, render.Options{StageImage: opts.StageImage})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := rendered.Spec.Template
	pods["rendered Job's pod, with stage-in"] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sim-abcde", Namespace: ns.Name, Labels: tmpl.Labels, Annotations: tmpl.Annotations}, Spec: tmpl.Spec}

	for name, pod := range pods {
		t.Run(name, func(t *testing.T) {
			if err := env.Client.Create(ctx, pod); err != nil {
				t.Errorf("create %s in a restricted namespace: %v", pod.Name, err)
			}
		})
	}
}
