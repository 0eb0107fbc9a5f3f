// Package envtest starts a real kube-apiserver and etcd (built from the Go
// module proxy by test/tools/install.sh) with kdefer's CRDs installed, for
// integration tests. Without KUBEBUILDER_ASSETS the tests are skipped, unless
// KDEFER_REQUIRE_TOOLS=1 (set by `make test`), which makes that a failure.
package envtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kdefer/kdefer/test/repo"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	kdeferscheme "github.com/kdefer/kdefer/api/scheme"
)

// Env is a running apiserver with kdefer's CRDs.
type Env struct {
	*ctrlenvtest.Environment
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme
}

// Option adjusts the environment before it starts (e.g. webhook install
// options, extra CRD or manifest paths, apiserver flags).
type Option func(*ctrlenvtest.Environment)

// Start starts the environment and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" || !exists(filepath.Join(assets, "kube-apiserver")) || !exists(filepath.Join(assets, "etcd")) {
		if os.Getenv("KDEFER_REQUIRE_TOOLS") == "1" {
			t.Fatalf("KUBEBUILDER_ASSETS=%q holds no kube-apiserver and etcd: run 'make envtest-assets'", assets)
		}
		t.Skip("no kube-apiserver/etcd: run 'make envtest-assets' and set KUBEBUILDER_ASSETS=bin/envtest")
	}
	scheme := kdeferscheme.New()
	te := &ctrlenvtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repo.MustRoot(), "deploy", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                scheme,
	}
	for _, o := range opts {
		o(te)
	}
	cfg, err := te.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := te.Stop(); err != nil {
			t.Logf("stopping envtest: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("creating client: %v", err)
	}
	return &Env{Environment: te, Config: cfg, Client: c, Scheme: scheme}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
