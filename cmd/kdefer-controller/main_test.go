package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kdefer/kdefer/cmd/kdefer-controller/app"
	"github.com/kdefer/kdefer/test/envtest"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The binary's wiring against a real apiserver: flags, leader election,
// readiness, and kdefer's metrics on /metrics, over HTTPS, to a bearer
// token the apiserver authenticates and authorizes (deploy/rbac's
// kdefer-metrics-reader) only.
func TestManagerBinary(t *testing.T) {
	env := envtest.Start(t)
	reader, stranger := metricsTokens(t, env)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	metrics, probes := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--kubeconfig", kubeconfig, "--disable-webhooks", "--leader-election-namespace", "default",
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics), fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probes),
			"--log-level", "error", "--kube-api-qps", "20", "--kube-api-burst", "40"})
	}()
	get := func(scheme string, port int, path, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, port, path), nil)
		if err != nil {
			return 0, err.Error()
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		// The metrics server's certificate is self-signed.
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, _ := get("http", probes, "/readyz", "")
		lease := &coordinationv1.Lease{}
		leaseErr := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: app.LeaderElectionID}, lease)
		_, body := get("https", metrics, "/metrics", reader)
		if code == 200 && leaseErr == nil && lease.Spec.HolderIdentity != nil && strings.Contains(body, "kdefer_reaction_seconds") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: readyz %d, lease %v, kdefer metrics present %v", code, leaseErr, strings.Contains(body, "kdefer_"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := get("https", metrics, "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("metrics without a token: %d %.80q, want 401", code, body)
	}
	if code, body := get("https", metrics, "/metrics", stranger); code != http.StatusForbidden {
		t.Errorf("metrics with a token not bound to kdefer-metrics-reader: %d %.80q, want 403", code, body)
	}
	if code, body := get("http", metrics, "/metrics", reader); code == http.StatusOK {
		t.Errorf("metrics over plain HTTP: %d %.80q, want refused", code, body)
	}
	cancel()
	select {
	case rc := <-done:
		if rc != 0 {
			t.Errorf("exit code %d after SIGTERM-like cancel", rc)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not stop")
	}
}

// metricsTokens returns the tokens of two ServiceAccounts: one bound to
// deploy/rbac's kdefer-metrics-reader ClusterRole, one bound to nothing.
func metricsTokens(t *testing.T, env *envtest.Env) (reader, stranger string) {
	t.Helper()
	ctx := context.Background()
	envtest.Apply(t, env.Client, envtest.ReadObjects(t, "deploy/rbac/metrics_reader_role.yaml")...)
	token := func(name string) string {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
		if err := env.Client.Create(ctx, sa); err != nil {
			t.Fatal(err)
		}
		tr := &authenticationv1.TokenRequest{}
		if err := env.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, stranger = token("prometheus"), token("stranger")
	if err := env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-kdefer-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kdefer-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: "default"}},
	}); err != nil {
		t.Fatal(err)
	}
	return reader, stranger
}

func TestFlags(t *testing.T) {
	if rc := run(context.Background(), []string{"--version"}); rc != 0 {
		t.Errorf("--version: %d", rc)
	}
	if rc := run(context.Background(), []string{"--no-such-flag"}); rc != 2 {
		t.Errorf("bad flag: %d, want 2", rc)
	}
	if rc := run(context.Background(), []string{"--log-level", "loud"}); rc != 2 {
		t.Errorf("bad log level: %d, want 2", rc)
	}
}
