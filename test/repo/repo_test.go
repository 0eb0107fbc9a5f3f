package repo

import (
	"os"
	"path/filepath"
	"testing"
)

// The root is found from a package directory and from hack/tools, whose own
// go.mod declares another module.
func TestRoot(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy", "crd")); err != nil {
		t.Fatalf("root %s holds no deploy/crd: %v", root, err)
	}
	t.Chdir(filepath.Join(root, "hack", "tools"))
	if got, err := Root(); err != nil || got != root {
		t.Errorf("from hack/tools: Root() = %q, %v; want %q", got, err, root)
	}
	t.Chdir(t.TempDir())
	if _, err := Root(); err == nil {
		t.Error("outside the repository: Root() found one")
	}
}
