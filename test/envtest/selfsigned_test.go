package envtest_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/certs"
	kwebhook "github.com/kdefer/kdefer/controller/webhook"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/resolve"
	"github.com/kdefer/kdefer/test/envtest"
)

// TestSelfSignedWebhooks runs the production path: a manager whose webhook
// server uses certificates kdefer generated itself, and webhook
// configurations from deploy/ whose caBundle kdefer patched, called by a
// real apiserver (by URL, as on the local cluster).
func TestSelfSignedWebhooks(t *testing.T) {
	env := envtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kdefer-system"}}); err != nil {
		t.Fatal(err)
	}
	// deploy/'s webhook configurations, called by URL at the local port.
	for _, o := range envtest.ReadObjects(t, "deploy/webhook/webhooks.yaml") {
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for i, h := range hooks {
			m := h.(map[string]any)
			path, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
			m["clientConfig"] = map[string]any{"url": fmt.Sprintf("https://127.0.0.1:%d%s", port, path)}
			hooks[i] = m
		}
		_ = unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
		envtest.Apply(t, env.Client, o)
	}

	opts := kwebhook.Options{Port: port, CertDir: t.TempDir(), Certs: certs.Options{DNSNames: []string{"127.0.0.1"}}, Render: renderOpts}
	srv, err := kwebhook.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:        env.Scheme,
		Metrics:       metricsserver.Options{BindAddress: "0"},
		WebhookServer: srv,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The webhooks read namespace defaults through the cache's index, which
	// the controller registers in kdefer-controller (controller.SetupIndexes).
	if err := resolve.SetupIndex(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	if err := kwebhook.SetupWithManager(mgr, opts); err != nil {
		t.Fatalf("SetupWithManager: %v", err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	ns := namespace(t, env, "selfsigned")
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		job := rt.MakeJob(fmt.Sprintf("job-%d", i), ns).StageOut("s3://r/{pod}/").Obj()
		err := env.Client.Create(ctx, job)
		if err == nil {
			if job.Spec.Template.Annotations[v1.AnnotationRendered] == "" {
				t.Fatalf("Job admitted unrendered: %+v", job.Spec.Template.ObjectMeta)
			}
			break
		}
		// Until the server listens the apiserver cannot call it; a TLS
		// error would mean the generated certificates are wrong.
		if strings.Contains(err.Error(), "x509") || strings.Contains(err.Error(), "certificate") || time.Now().After(deadline) {
			t.Fatalf("creating a Job through the self-signed webhooks: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	bad := rt.MakeJob("bad", ns).StageOut("s3://r/{pod}/").Annotation(v1.AnnotationTriggers, "Exploded").Obj()
	wantDenied(t, env.Client.Create(ctx, bad), `annotation kdefer.io/triggers: "Exploded" is not a trigger`)
	var got batchv1.Job
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job-0"}, &got); err == nil && got.Spec.Template.Labels[v1.LabelManaged] != "true" {
		t.Error("stored Job not rendered")
	}
}
