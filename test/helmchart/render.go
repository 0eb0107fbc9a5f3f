// Package helmchart checks kdefer's Helm chart (deploy/helm/kdefer) against
// the kustomize manifests it is built from: helm lint, helm template with
// each variant's values equal to kustomize's build of that variant, and
// every rendered object decoded strictly, as the apiserver would take it.
// Render is exported for the envtest suites that apply what the chart
// installs (a namespaced install's RBAC).
//
// Helm and kustomize run in-process, from their Go packages: no helm or
// kubectl binary, so `make verify` runs this on a fresh machine before any
// tool is built, and the Kubernetes packages helm needs are the ones kdefer
// compiles anyway (helm v4.3 requires the same k8s.io v0.37 and
// controller-runtime; the chart costs the helm and kustomize packages only).
package helmchart

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"

	"github.com/kdefer/kdefer/test/repo"
)

// Render is `helm template` of the chart with vals (YAML) over its
// values.yaml, as an install named kdefer into namespace ns: the objects as
// one multi-document YAML, or the error the chart fails with.
func Render(vals, ns string) ([]byte, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	ch, err := loader.LoadDir(filepath.Join(root, chartDir))
	if err != nil {
		return nil, fmt.Errorf("load the chart: %w", err)
	}
	return RenderChart(ch, vals, ns)
}

// RenderChart is Render of the chart ch (e.g. a packaged release's, pulled
// from a registry), its values checked against its schema as helm does.
func RenderChart(ch *chart.Chart, vals, ns string) ([]byte, error) {
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(vals), &m); err != nil {
		return nil, fmt.Errorf("values %q: %w", vals, err)
	}
	rv, err := chartutil.ToRenderValues(ch, m,
		common.ReleaseOptions{Name: "kdefer", Namespace: ns, Revision: 1, IsInstall: true},
		common.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, fmt.Errorf("helm template: %w", err)
	}
	// In file order, as helm template prints them (the order of objects
	// does not matter to the comparisons, only to a reader of a failure).
	names := make([]string, 0, len(files))
	for n := range files {
		if strings.HasSuffix(n, ".yaml") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out bytes.Buffer
	for _, n := range names {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", n, files[n])
	}
	return out.Bytes(), nil
}

// chartDir is the chart, relative to the repository root.
const chartDir = "deploy/helm/kdefer"
