package envtest_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kwebhook "github.com/kdefer/kdefer/controller/webhook"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/resolve"
	"github.com/kdefer/kdefer/test/envtest"
)

// TestAdmission runs against one real apiserver: the CRDs' validation, the
// webhooks served in-process, the retained-volume admission policy from
// deploy/, and `kubectl apply -k deploy/`'s objects (last: it replaces the
// webhook configurations).
func TestAdmission(t *testing.T) {
	env := envtest.Start(t, envtest.WithWebhooks())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	policies := serveWebhooks(t, ctx, env)

	t.Run("CRDValidation", func(t *testing.T) { testCRDValidation(t, env) })
	t.Run("Webhooks", func(t *testing.T) { testWebhooks(t, env) })
	t.Run("NamespaceDefault", func(t *testing.T) { testNamespaceDefault(t, env, policies) })
	t.Run("ClusterPolicy", func(t *testing.T) { testClusterPolicy(t, env, policies) })
	t.Run("CronJobs", func(t *testing.T) { testCronJobs(t, env) })
	t.Run("RetainWorkVolumes", func(t *testing.T) { testRetainPolicy(t, env) })
	t.Run("Kustomize", func(t *testing.T) { testKustomize(t, env) })
}

var renderOpts = render.Options{StageImage: "kdefer.io/kdefer-stage:test"}

// serveWebhooks serves the webhooks as the manager does: named policies read
// from the apiserver, namespace defaults through a cache indexed by
// resolve.IndexNamespaceDefault, which it returns.
func serveWebhooks(t *testing.T, ctx context.Context, env *envtest.Env) cache.Cache {
	t.Helper()
	policies, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, ByObject: map[client.Object]cache.ByObject{&v1.DeferPolicy{}: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := resolve.SetupIndex(ctx, policies); err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := policies.Start(ctx); err != nil {
			t.Errorf("policy cache: %v", err)
		}
	}()
	if !policies.WaitForCacheSync(ctx) {
		t.Fatal("policy cache not synced")
	}
	wio := env.WebhookInstallOptions
	srv := webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir})
	kwebhook.Register(srv, kwebhook.NewHandlers(kwebhook.Options{Render: renderOpts, Cache: policies}, env.Client))
	(&kwebhook.PVCArmer{Client: env.Client, Reader: env.Client}).Register(srv)
	go func() {
		if err := srv.Start(ctx); err != nil {
			t.Errorf("webhook server: %v", err)
		}
	}()
	waitTLS(t, net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort)))
	return policies
}

func namespace(t *testing.T, env *envtest.Env, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

func wantDenied(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("request allowed, want a denial containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("denial does not contain %q:\n%v", p, err)
		}
	}
}

func testCRDValidation(t *testing.T, env *envtest.Env) {
	ctx := context.Background()
	ns := namespace(t, env, "crd")
	// Bypass the webhook to reach the CRD's own rules: webhooks only add to them.
	cases := []struct {
		name string
		spec v1.DeferPolicySpec
		want string
	}{
		{name: "nothing to do", spec: v1.DeferPolicySpec{}, want: "a policy needs stageOut or at least one entry in deferContainers"},
		{name: "url scheme", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "http://x"}}, want: "stageOut.url must start with s3://"},
		{name: "path", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x", Path: "../up"}}, want: "stageOut.path must be relative to the work volume and must not contain '..'"},
		{name: "volume name", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, WorkVolume: v1.WorkVolume{Name: "Bad_Name"}}, want: "workVolume.name must be a DNS label"},
		{name: "mount path", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, WorkVolume: v1.WorkVolume{MountPath: "rel"}}, want: "workVolume.mountPath must be absolute"},
		{name: "retainFor", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, OnFailure: &v1.OnFailure{Volume: v1.VolumeRelease, RetainFor: &metav1.Duration{Duration: time.Hour}}}, want: "onFailure.retainFor is only allowed with volume: Retain"},
		{name: "stageOut locked but unset", spec: v1.DeferPolicySpec{DeferContainers: []corev1.Container{{Name: "c", Image: "busybox"}}, Locked: []v1.LockedField{v1.LockedStageOut}},
			want: "spec.locked holds stageOut but spec.stageOut is not set: set spec.stageOut.url"},
		{name: "locked enum", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, Locked: []v1.LockedField{"deadline"}}, want: `spec.locked[0]: Unsupported value: "deadline"`},
		{name: "trigger rule url scheme", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, TriggerRules: []v1.TriggerRule{{Triggers: []v1.Trigger{v1.TriggerSucceeded}, URL: "b/{job}/output/"}}}, want: "triggerRules[].url must start with s3://"},
		{name: "web identity for no store", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, WebIdentity: &v1.WebIdentity{}},
			want: "webIdentity needs exactly one of s3 and azure"},
		{name: "sts endpoint", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, WebIdentity: &v1.WebIdentity{S3: &v1.S3WebIdentity{RoleARN: "r", STSEndpoint: "sts.example"}}},
			want: "webIdentity.s3.stsEndpoint must be an http:// or https:// URL"},
		{name: "token lifetime", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, WebIdentity: &v1.WebIdentity{ExpirationSeconds: ptr(int64(60)), S3: &v1.S3WebIdentity{RoleARN: "r"}}},
			want: "spec.webIdentity.expirationSeconds: Invalid value: 60: spec.webIdentity.expirationSeconds in body should be greater than or equal to 600"},
		{name: "service account name", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, ServiceAccountName: "Stager"},
			want: "serviceAccountName must be a DNS subdomain"},
		{name: "trigger enum", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, TriggerRules: []v1.TriggerRule{{Triggers: []v1.Trigger{"Exploded"}}}}, want: `spec.triggerRules[0].triggers[0]: Unsupported value: "Exploded"`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.DeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: ns}, Spec: tc.spec}
			wantDenied(t, env.Client.Create(ctx, p), tc.want)
		})
	}
	// DeferRun identity is immutable; the trigger (in status) is set once.
	run := &v1.DeferRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns},
		Spec: v1.DeferRunSpec{PodName: "p", PodUID: types.UID("u1"), Policy: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}}}}
	if err := env.Client.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	run.Spec.PodName = "other"
	wantDenied(t, env.Client.Update(ctx, run), "spec.podName is immutable")
	run.Spec.PodName = "p"
	run.Status.Trigger = v1.TriggerOOMKilled
	if err := env.Client.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}
	run.Status.Trigger = v1.TriggerSucceeded
	wantDenied(t, env.Client.Status().Update(ctx, run), "status.trigger cannot change once set")
}

func ptr[T any](v T) *T { return &v }

// waitTLS waits until addr completes a TLS handshake.
func waitTLS(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook server not up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
