package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
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
// readiness, and kdefer's metrics on /metrics.
func TestManagerBinary(t *testing.T) {
	env := envtest.Start(t)
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
	get := func(port int, path string) (int, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, _ := get(probes, "/readyz")
		lease := &coordinationv1.Lease{}
		leaseErr := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: app.LeaderElectionID}, lease)
		_, body := get(metrics, "/metrics")
		if code == 200 && leaseErr == nil && lease.Spec.HolderIdentity != nil && strings.Contains(body, "kdefer_reaction_seconds") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: readyz %d, lease %v, kdefer metrics present %v", code, leaseErr, strings.Contains(body, "kdefer_"))
		}
		time.Sleep(200 * time.Millisecond)
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
