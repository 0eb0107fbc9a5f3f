package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/test/repo"
)

// The supported Kubernetes range is stated where a user looks (README,
// docs/usage.md, the chart's kubeVersion, which helm install enforces, and
// its README) and it is the range CI proves: every `make test` runs the e2e
// tier on the newest release and a smoke subset on the oldest supported one
// (make e2e-oldest), the release of the oldest wrapper module in
// test/tools/kube. Raising the floor is removing that wrapper; these places
// then must say so too.
var (
	// "v1.34 and newer", "Kubernetes 1.34+", "1.34 or later": a lower bound
	// stated in prose.
	floorRE = regexp.MustCompile(`(?i)\bv?1\.(\d+)(?:\+|\.0-0| (?:and|or) (?:newer|later))`)
	// What must be found, with the floor's minor for %d.
	floorStatements = map[string][]string{
		"README.md":                     {"Kubernetes v1.%d and newer"},
		"docs/usage.md":                 {"kdefer supports Kubernetes v1.%d and newer"},
		"deploy/helm/kdefer/Chart.yaml": {`kubeVersion: ">=1.%d.0-0"`},
		"deploy/helm/kdefer/README.md":  {"Kubernetes `>=1.%d.0-0`"},
	}
	// Every lower bound in these files must be the floor.
	floorScanned = []string{"README.md", "docs/usage.md", "docs/design.md", "docs/security.md",
		"deploy/helm/kdefer/Chart.yaml", "deploy/helm/kdefer/README.md", "deploy/helm/kdefer/values.yaml"}
)

// oldestMinor is the minor of the oldest wrapper module test/tools/kube/v1.MINOR.
func oldestMinor(t *testing.T, root string) int {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(root, "test/tools/kube/v1.*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no wrapper module in test/tools/kube: %v", err)
	}
	oldest := -1
	for _, d := range dirs {
		m, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "v1."))
		if err != nil {
			t.Fatalf("%s: not v1.MINOR", d)
		}
		if oldest < 0 || m < oldest {
			oldest = m
		}
	}
	return oldest
}

func TestSupportedKubernetesRange(t *testing.T) {
	root := repo.MustRoot()
	minor := oldestMinor(t, root)
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for f, want := range floorStatements {
		text := read(f)
		for _, w := range want {
			if w = strings.ReplaceAll(w, "%d", strconv.Itoa(minor)); !strings.Contains(text, w) {
				t.Errorf("%s does not say %q: the oldest supported release is v1.%d (test/tools/kube's oldest wrapper, which make e2e-oldest runs)", f, w, minor)
			}
		}
	}
	for _, f := range floorScanned {
		for i, line := range strings.Split(read(f), "\n") {
			for _, m := range floorRE.FindAllStringSubmatch(line, -1) {
				if n, _ := strconv.Atoi(m[1]); n != minor {
					t.Errorf("%s:%d: %q: a floor other than v1.%d, the oldest supported release", f, i+1, m[0], minor)
				}
			}
		}
	}
}
