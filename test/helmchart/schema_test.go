package helmchart

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"sigs.k8s.io/yaml"

	"github.com/kdefer/kdefer/test/repo"
)

// The chart's values.schema.json is generated from values.yaml by make
// generate (helm-values-schema-json, hack/tools/helm-schema); Helm checks
// values against it in helm install, upgrade, template and lint, the same
// code (chartutil.ToRenderValues, lint.RunAll) as render and TestChartLint
// run here. These tests hold the schema to values.yaml and to every values
// file of the repository, and show it refuses a misspelt key.

// schemaNode is a (sub)schema of values.schema.json.
type schemaNode = map[string]any

func loadSchema(t testing.TB) schemaNode {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo.MustRoot(), chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s schemaNode
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	if got, want := s["$schema"], "http://json-schema.org/draft-07/schema#"; got != want {
		t.Errorf("values.schema.json is %v, want draft-07 (%s)", got, want)
	}
	return s
}

// closed: the schema's object refuses keys it does not name.
func closed(s schemaNode) bool {
	ap, ok := s["additionalProperties"].(bool)
	return ok && !ap
}

// TestValuesSchemaCoversValues: every key of values.yaml is in the schema
// (so a value added without `make generate` fails here, not at a user's
// helm install), typed, with a description (the README's), and every object
// the chart owns is closed; only the objects that pass through to
// Kubernetes are open.
func TestValuesSchemaCoversValues(t *testing.T) {
	s := loadSchema(t)
	var vals map[string]any
	if err := yaml.Unmarshal([]byte(mustRead(chartDir+"/values.yaml")), &vals); err != nil {
		t.Fatal(err)
	}
	var open []string
	var walk func(path string, v map[string]any, s schemaNode)
	walk = func(path string, v map[string]any, s schemaNode) {
		props, _ := s["properties"].(map[string]any)
		for k, e := range v {
			p := strings.TrimPrefix(path+"."+k, ".")
			sub, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("values.yaml's %s is not in values.schema.json: run make generate", p)
				continue
			}
			if sub["type"] == nil {
				t.Errorf("values.schema.json: %s has no type", p)
			}
			m, isMap := e.(map[string]any)
			if isMap && sub["properties"] != nil {
				if !closed(sub) {
					t.Errorf("values.schema.json: %s is the chart's object and open (additionalProperties not false)", p)
				}
				walk(p, m, sub)
				continue
			}
			if isMap && !closed(sub) {
				open = append(open, p)
			}
			if d, _ := sub["description"].(string); strings.TrimSpace(d) == "" {
				t.Errorf("values.yaml's %s has no `# -- description` comment", p)
			}
		}
	}
	if !closed(s) {
		t.Error("values.schema.json's root is open (additionalProperties not false)")
	}
	walk("", vals, s)
	// What passes through to Kubernetes as it is, and so takes any key.
	sort.Strings(open)
	want := []string{
		"affinity",
		"metrics.grafanaDashboard.annotations", "metrics.grafanaDashboard.labels",
		"metrics.prometheusRule.labels", "metrics.serviceMonitor.labels",
		"nodeAgent.resources", "nodeSelector", "resources", "strategy",
	}
	if !slices.Equal(open, want) {
		t.Errorf("open objects of values.schema.json %v, want %v (a value the chart owns is closed)", open, want)
	}
}

// TestValuesFilesMeetSchema: every chart values file of the repository
// (the e2e's and the local cluster's among them) passes the schema over
// values.yaml, as helm install -f FILE checks it.
func TestValuesFilesMeetSchema(t *testing.T) {
	root := repo.MustRoot()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), "values.yaml") {
			rel, err := filepath.Rel(root, p)
			files = append(files, rel)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{chartDir + "/values.yaml", LocalValues, "test/e2e/multinode-values.yaml"} {
		if !slices.Contains(files, want) {
			t.Errorf("values files %v lack %s", files, want)
		}
	}
	ch := load(t)
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			if _, err := chartutil.ToRenderValues(ch, values(t, mustRead(f)), common.ReleaseOptions{Name: "kdefer", Namespace: namespace, IsInstall: true}, common.DefaultCapabilities); err != nil {
				t.Errorf("helm install -f %s: %v", f, err)
			}
		})
	}
}

// TestChartRefusesMisspeltValue: a key the chart does not know, at the top
// and in every object the chart owns, fails helm template (install) and
// helm lint, naming the key, instead of being ignored.
func TestChartRefusesMisspeltValue(t *testing.T) {
	var paths [][]string
	var walk func(path []string, s schemaNode)
	walk = func(path []string, s schemaNode) {
		if !closed(s) {
			return
		}
		paths = append(paths, path)
		props, _ := s["properties"].(map[string]any)
		for k, sub := range props {
			if m, ok := sub.(map[string]any); ok {
				walk(append(slices.Clone(path), k), m)
			}
		}
	}
	walk(nil, loadSchema(t))
	if len(paths) < 10 {
		t.Fatalf("only %d closed objects in values.schema.json", len(paths))
	}
	for _, p := range paths {
		vals := "misspelt: 1"
		for i := len(p) - 1; i >= 0; i-- {
			vals = p[i] + ": {" + vals + "}"
		}
		_, err := renderErr(t, vals, namespace)
		if err == nil || !strings.Contains(err.Error(), "additional properties 'misspelt' not allowed") {
			t.Errorf("helm template with %q: error %v, want the schema refusing misspelt", vals, err)
		}
	}
	// helm lint too, and a misspelling of a real key (replica for replicas).
	res := lint.RunAll(filepath.Join(repo.MustRoot(), chartDir), values(t, "replica: 3"), namespace)
	var msgs []string
	for _, m := range res.Messages {
		if m.Severity == support.ErrorSev {
			msgs = append(msgs, m.Error())
		}
	}
	if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, "additional properties 'replica' not allowed") }) {
		t.Errorf("helm lint with replica: 3: errors %q, want the schema refusing replica", msgs)
	}
}

// load is the chart as helm loads it.
func load(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.LoadDir(filepath.Join(repo.MustRoot(), chartDir))
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return ch
}
