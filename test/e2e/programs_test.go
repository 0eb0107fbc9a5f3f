//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"testing"

	"github.com/kdefer/kdefer/test/repo"
)

// program returns the path of the program built from pkg, a package of this
// module ("./cmd/kdefer"): the one test/e2e/run.sh built before the
// scenarios into $KDEFER_E2E_BIN, or, where nothing built it (go test run
// by hand), one built now. Built by a scenario, the link ran on a machine
// busy with the other scenarios: kdefer's CLI took ~70 s of
// TestDeadlineThenRetry's 147, the single-node phase's longest (c6,
// 2026-12-02; from its run failing to 'kdefer retry' done 73 s, prebuilt
// 4 s in w13).
func program(t *testing.T, pkg string) string {
	t.Helper()
	name := path.Base(pkg)
	if dir := os.Getenv("KDEFER_E2E_BIN"); dir != "" {
		bin := filepath.Join(dir, name)
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("KDEFER_E2E_BIN: %v (test/e2e/run.sh builds %s there)", err, pkg)
		}
		return bin
	}
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, pkg)
	cmd.Dir = repo.MustRoot()
	if _, err := os.Stat(filepath.Join(cmd.Dir, pkg, "go.mod")); err == nil {
		// A module of its own (./test/promql): built in its directory.
		cmd.Dir, cmd.Args[len(cmd.Args)-1] = filepath.Join(cmd.Dir, pkg), "."
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return bin
}
