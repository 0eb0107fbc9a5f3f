package helmchart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/kdefer/kdefer/test/repo"
)

// namespace is the one deploy/ installs into, and so the release's here.
const namespace = "kdefer-system"

// LocalValues are the chart values that install what deploy/overlays/local
// does (the project's local cluster); the e2e installs with them.
const LocalValues = "deploy/helm/local-values.yaml"

type variant struct{ name, kustomization, values string }

// variants pairs each kustomize variant with the chart values that stand
// for it. A value the chart has and kustomize does not (a ServiceMonitor,
// quotas) has tests of its own below.
var variants = []variant{
	{"base", "deploy", `
namespace: {create: true}
`},
	{"cert-manager", "deploy/overlays/cert-manager", `
namespace: {create: true}
certificates: {mode: cert-manager}
`},
	// The overlay runs the images make images imports as tarballs; the e2e
	// tier installs the chart a release stamped for its registry instead.
	{"local", "deploy/overlays/local", mustRead(LocalValues) + `
image: {repository: kdefer.io/kdefer-controller}
deferPods: {image: {repository: kdefer.io/kdefer-stage}}
`},
	{"network-policy", "test/helmchart/testdata/network-policy", `
namespace: {create: true}
networkPolicy: {enabled: true, webhookFrom: [{ipBlock: {cidr: 10.0.0.10/32}}]}
`},
}

func TestChartMatchesKustomize(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			want := index(t, kustomize(t, v.kustomization))
			got, _ := splitHooks(index(t, render(t, v.values)))
			if diff := cmp.Diff(keys(want), keys(got)); diff != "" {
				t.Errorf("objects of kustomize build %s (-) and helm template (+) differ:\n%s", v.kustomization, diff)
			}
			for k, w := range want {
				if g, ok := got[k]; ok {
					if diff := cmp.Diff(celSpaces(w).Object, celSpaces(normalize(withoutHelmLabels(g, w))).Object); diff != "" {
						t.Errorf("%s: kustomize build %s (-) and helm template (+) differ:\n%s", k, v.kustomization, diff)
					}
				}
			}
		})
	}
}

func TestChartLint(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			vals := values(t, v.values)
			res := lint.RunAll(filepath.Join(repo.MustRoot(), chartDir), vals, namespace)
			for _, m := range res.Messages {
				// INFO is advice (an icon); WARNING and ERROR are defects.
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// normalize drops what Helm alone adds: the CRDs' keep policy (so that
// helm uninstall does not delete every DeferRun with them).
func normalize(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	if u.GetKind() == "CustomResourceDefinition" {
		a := u.GetAnnotations()
		delete(a, "helm.sh/resource-policy")
		if len(a) == 0 {
			a = nil
		}
		u.SetAnnotations(a)
	}
	return u
}

// helmOnlyLabels are the standard labels the chart puts on every object
// and kustomize's deploy/ does not: the release's name and Helm's own are
// Helm's to know (a kustomize install has no release), and version and
// part-of would have to be kept current in every kustomization by hand.
var helmOnlyLabels = []string{
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
	"app.kubernetes.io/part-of",
	"app.kubernetes.io/managed-by",
	"helm.sh/chart",
}

// withoutHelmLabels drops from the chart's object g what the chart alone
// labels it with: helmOnlyLabels, and app.kubernetes.io/name and component
// where kustomize's object w has none (controller-gen's CRDs and roles have
// no labels; where w has one, the two must agree). Only metadata.labels:
// selectors and pod templates are compared whole.
func withoutHelmLabels(g, w *unstructured.Unstructured) *unstructured.Unstructured {
	g = g.DeepCopy()
	l := g.GetLabels()
	for _, k := range helmOnlyLabels {
		delete(l, k) // TestChartLabels checks they are there
	}
	for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/component"} {
		if _, ok := w.GetLabels()[k]; !ok {
			delete(l, k)
		}
	}
	if len(l) == 0 {
		l = nil
	}
	g.SetLabels(l)
	return g
}

// celSpaces collapses the white space of CEL expressions. The YAML parsers
// disagree on a folded block scalar (>-) with more-indented lines, as the
// admission policy's messageExpression has: kustomize's (yaml.v3) keeps an
// extra line break that Helm's (sigs.k8s.io/yaml) folds. Outside string
// literals, CEL does not see the difference; inside, both keep the text.
func celSpaces(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && (k == "expression" || k == "messageExpression") {
					v[k] = strings.Join(strings.Fields(s), " ")
					continue
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(u.Object)
	return u
}

// render is `helm template` of the chart with vals (YAML) over its
// values.yaml, as an install into deploy/'s namespace.
func render(t testing.TB, vals string) []byte {
	t.Helper()
	return renderIn(t, vals, namespace)
}

// renderIn renders as an install into namespace ns.
func renderIn(t testing.TB, vals, ns string) []byte {
	t.Helper()
	out, err := renderErr(t, vals, ns)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// renderErr renders and returns the error the chart fails with, if it does.
func renderErr(t testing.TB, vals, ns string) ([]byte, error) {
	t.Helper()
	return Render(vals, ns)
}

func values(t testing.TB, vals string) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(vals), &m); err != nil {
		t.Fatalf("values %q: %v", vals, err)
	}
	return m
}

// kustomize is `kustomize build dir` (what `kubectl apply -k` applies).
func kustomize(t testing.TB, dir string) []byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repo.MustRoot(), dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return out
}

// index maps "Kind namespace/name" to each object of a multi-document YAML,
// failing on an object twice.
func index(t testing.TB, data []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	for _, u := range decode(t, data) {
		k := key(u)
		if _, dup := out[k]; dup {
			t.Errorf("%s twice", k)
		}
		out[k] = u
	}
	return out
}

func key(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
}

func keys(m map[string]*unstructured.Unstructured) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// decode parses every non-empty document of a multi-document YAML.
func decode(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading YAML: %v", err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("decoding YAML: %v\n%s", err, doc)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// mustRead reads a file of the repository (path relative to its root).
func mustRead(path string) string {
	data, err := os.ReadFile(filepath.Join(repo.MustRoot(), path))
	if err != nil {
		panic(fmt.Sprintf("reading %s: %v", path, err))
	}
	return string(data)
}
