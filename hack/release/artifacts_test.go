package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/registry"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/kdefer/kdefer/internal/version"
	"github.com/kdefer/kdefer/test/helmchart"
	"github.com/kdefer/kdefer/test/repo"
)

// workloads are the Deployment's and DaemonSet's containers of a
// multi-document YAML, by kind, and the number of documents.
func workloads(t *testing.T, data []byte) (map[string][]string, map[string][]string, int) {
	t.Helper()
	images, args := map[string][]string{}, map[string][]string{}
	n := 0
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var o struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &o); err != nil || o.Kind == "" {
			continue
		}
		n++
		if o.Kind != "Deployment" && o.Kind != "DaemonSet" {
			continue
		}
		var d appsv1.Deployment // the pod template is at the same path in both
		if err := yaml.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			images[o.Kind] = append(images[o.Kind], c.Image)
			args[o.Kind] = append(args[o.Kind], c.Args...)
		}
	}
	return images, args, n
}

func checkImages(t *testing.T, what string, data []byte, reg, v string) int {
	t.Helper()
	images, args, n := workloads(t, data)
	ctl := reg + "/kdefer-controller:" + v
	for _, kind := range []string{"Deployment", "DaemonSet"} {
		if !slices.Equal(images[kind], []string{ctl}) {
			t.Errorf("%s: %s images %q, want [%s]", what, kind, images[kind], ctl)
		}
	}
	if stage := "--stage-image=" + reg + "/kdefer-stage:" + v; !slices.Contains(args["Deployment"], stage) {
		t.Errorf("%s: the controller's args %q lack %s", what, args["Deployment"], stage)
	}
	return n
}

// TestReleasedChart: the chart pushed to oci://R/charts/kdefer:VER, pulled
// back as helm install pulls it, has appVersion V and, rendered with no
// values (its schema checked), names R's images at V.
func TestReleasedChart(t *testing.T) {
	reg := testRegistry(t) + "/kdefer"
	const v = "v0.2.0-rc.1"
	ch, err := releaseChart(repo.MustRoot(), t.TempDir(), reg, v)
	if err != nil {
		t.Fatal(err)
	}
	if want := "oci://" + reg + "/charts/kdefer:0.2.0-rc.1"; ch.ref != want {
		t.Errorf("chart pushed to %s, want %s", ch.ref, want)
	}
	c, err := registryClient(reg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Pull(strings.TrimPrefix(ch.ref, "oci://"), registry.PullOptWithChart(true))
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Digest != ch.digest {
		t.Errorf("pulled %s, pushed %s", res.Manifest.Digest, ch.digest)
	}
	pulled, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
	if err != nil {
		t.Fatal(err)
	}
	if pulled.Metadata.AppVersion != v || pulled.Metadata.Version != "0.2.0-rc.1" {
		t.Errorf("chart version %s appVersion %s, want 0.2.0-rc.1 and %s", pulled.Metadata.Version, pulled.Metadata.AppVersion, v)
	}
	out, err := helmchart.RenderChart(pulled, "", "kdefer-system")
	if err != nil {
		t.Fatal(err)
	}
	checkImages(t, "the released chart", out, reg, v)
	var vals []byte
	for _, f := range pulled.Raw {
		if f.Name == "values.yaml" {
			vals = f.Data
		}
	}
	if !bytes.Contains(vals, []byte("# -- The controller's (and node agent's) image.")) {
		t.Error("the released values.yaml lost its comments (helm show values)")
	}
}

// TestManifests: manifests.yaml is deploy/'s objects with R's images at V,
// the stage image argument included.
func TestManifests(t *testing.T) {
	out := filepath.Join(t.TempDir(), "manifests.yaml")
	const reg, v = "registry.example/kdefer", "v0.2.0-rc.1"
	if err := writeManifests(repo.MustRoot(), "deploy", out, reg, v); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := checkImages(t, "manifests.yaml", data, reg, v); n < 30 {
		t.Errorf("manifests.yaml has %d objects: want all of deploy/'s", n)
	}
	if bytes.Contains(data, []byte("ghcr.io/kdefer")) {
		t.Error("manifests.yaml still names ghcr.io/kdefer")
	}
}

// TestReleaseWorkflow: .github/workflows/release.yml parses, runs on v*
// tags, tests before it releases and releases with make release.
func TestReleaseWorkflow(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo.MustRoot(), ".github/workflows/release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Name string `yaml:"name"`
		On   struct {
			Push struct {
				Tags []string `yaml:"tags"`
			} `yaml:"push"`
		} `yaml:"on"`
		Permissions map[string]string `yaml:"permissions"`
		Jobs        map[string]struct {
			RunsOn         string `yaml:"runs-on"`
			TimeoutMinutes int    `yaml:"timeout-minutes"`
			Needs          any    `yaml:"needs"`
			Steps          []struct {
				Name string            `yaml:"name"`
				Uses string            `yaml:"uses"`
				Run  string            `yaml:"run"`
				With map[string]any    `yaml:"with"`
				Env  map[string]string `yaml:"env"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	// YAML 1.2, as GitHub reads it ("on" is a key, not true), every field known.
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&wf); err != nil {
		t.Fatalf("release.yml: %v", err)
	}
	if !slices.Contains(wf.On.Push.Tags, "v*") {
		t.Errorf("on.push.tags %q: want v*", wf.On.Push.Tags)
	}
	if wf.Permissions["id-token"] != "write" || wf.Permissions["packages"] != "write" || wf.Permissions["contents"] != "write" {
		t.Errorf("permissions %v: keyless signing needs id-token: write, pushing packages: write, the release contents: write", wf.Permissions)
	}
	// Which job runs each command; a job's steps run in order, jobs in the
	// order their needs give (a map has none of its own).
	runsIn := map[string]string{}
	for name, j := range wf.Jobs {
		for _, s := range j.Steps {
			if s.Uses == "" && s.Run == "" {
				t.Errorf("step %q neither uses nor runs anything", s.Name)
			}
			for _, want := range []string{"make test", "make release", "cosign sign", "gh release create"} {
				if _, seen := runsIn[want]; !seen && strings.Contains(s.Run, want) {
					runsIn[want] = name
				}
			}
		}
	}
	for _, want := range []string{"make test", "make release", "cosign sign", "gh release create"} {
		if _, ok := runsIn[want]; !ok {
			t.Errorf("release.yml runs no %q", want)
		}
	}
	test, release := runsIn["make test"], runsIn["make release"]
	if test == "" || release == "" {
		return
	}
	if test == release {
		t.Errorf("release.yml runs make test and make release in one job %q: the release needs its own job, after the tests", test)
		return
	}
	// needs: a job name or a list of them, followed transitively.
	needs := func(job string) []string {
		switch n := wf.Jobs[job].Needs.(type) {
		case string:
			return []string{n}
		case []any:
			var out []string
			for _, v := range n {
				if s, ok := v.(string); ok {
					out = append(out, s)
				}
			}
			return out
		}
		return nil
	}
	seen := map[string]bool{}
	queue := needs(release)
	for len(queue) > 0 {
		job := queue[0]
		queue = queue[1:]
		if !seen[job] {
			seen[job] = true
			queue = append(queue, needs(job)...)
		}
	}
	if !seen[test] {
		t.Errorf("release.yml releases before it tests: job %q (make release) does not need job %q (make test)", release, test)
	}
}

// TestReleasedChartOfEarlierTree: --src of a tree whose chart names its
// images under another registry (kdefer.io/, before the images moved to
// ghcr.io/kdefer: the e2e tier's previous release) is stamped with R's
// images all the same (checkChart, inside releaseChart, reads them back).
func TestReleasedChartOfEarlierTree(t *testing.T) {
	src := t.TempDir()
	if err := os.CopyFS(filepath.Join(src, chartDir), os.DirFS(filepath.Join(repo.MustRoot(), chartDir))); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(src, chartDir, "values.yaml")
	data, err := os.ReadFile(values)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.ReplaceAll(data, []byte("repository: "+version.Registry+"/"), []byte("repository: kdefer.io/"))
	if bytes.Equal(old, data) {
		t.Fatalf("%s names no image under %s", values, version.Registry)
	}
	if err := os.WriteFile(values, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := releaseChart(src, t.TempDir(), testRegistry(t)+"/kdefer", "v0.1.0-g003e308068a3"); err != nil {
		t.Fatal(err)
	}
}
