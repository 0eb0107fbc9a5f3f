package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"
	"sigs.k8s.io/yaml"

	"github.com/kdefer/kdefer/api/v1alpha1"
)

// chartDir is kdefer's chart in the repository.
const chartDir = "deploy/helm/kdefer"

// ChartRepo is where under the registry the chart goes: oci://R/charts/kdefer.
const ChartRepo = "charts"

type releasedChart struct{ file, ref, digest string }

// releaseChart packages the chart for version v with its images in reg
// (values image.repository and deferPods.image.repository; the tags stay
// empty, so appVersion, which is v, names them) and pushes it to
// oci://reg/charts/kdefer, tagged with the chart's version as Helm wants.
// The values file is edited as text, so its comments (helm show values)
// stay, and read back to prove the edit took.
func releaseChart(root, out, reg, v string) (releasedChart, error) {
	ch, err := loader.LoadDir(filepath.Join(root, chartDir))
	if err != nil {
		return releasedChart{}, fmt.Errorf("load the chart: %w", err)
	}
	ch.Metadata.Version = strings.TrimPrefix(v, "v")
	ch.Metadata.AppVersion = v
	when := sourceDate(root)
	ch.ModTime, ch.SchemaModTime = when, when
	for _, f := range append(append(ch.Raw, ch.Templates...), ch.Files...) {
		f.ModTime = when
	}
	for _, f := range ch.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		for _, n := range []string{v1alpha1.ControllerImageName, v1alpha1.StageImageName} {
			// Any registry the tree's defaults name: version.Registry's
			// now, kdefer.io/ in charts before it (a --src of an earlier commit).
			from := regexp.MustCompile(`(?m)^(\s*repository: )\S+/` + regexp.QuoteMeta(n) + `$`)
			if len(from.FindAll(f.Data, -1)) != 1 {
				return releasedChart{}, fmt.Errorf("%s/values.yaml: want one line \"repository: REGISTRY/%s\" to stamp", chartDir, n)
			}
			f.Data = from.ReplaceAll(f.Data, []byte("${1}"+reg+"/"+n))
		}
		ch.Values = map[string]any{}
		if err := yaml.Unmarshal(f.Data, &ch.Values); err != nil {
			return releasedChart{}, err
		}
	}
	file, err := chartutil.Save(ch, out)
	if err != nil {
		return releasedChart{}, fmt.Errorf("package the chart: %w", err)
	}
	if err := checkChart(file, reg, v); err != nil {
		return releasedChart{}, err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return releasedChart{}, err
	}
	c, err := registryClient(reg)
	if err != nil {
		return releasedChart{}, err
	}
	ref := reg + "/" + ChartRepo + "/" + ch.Metadata.Name + ":" + ch.Metadata.Version
	res, err := c.Push(data, ref, registry.PushOptCreationTime(when.Format(time.RFC3339)))
	if err != nil {
		return releasedChart{}, fmt.Errorf("push the chart to %s: %w", ref, err)
	}
	return releasedChart{file: file, ref: "oci://" + ref, digest: res.Manifest.Digest}, nil
}

// checkChart loads the packaged chart back: its appVersion and images are v's in reg.
func checkChart(file, reg, v string) error {
	ch, err := loader.Load(file)
	if err != nil {
		return fmt.Errorf("load the packaged chart: %w", err)
	}
	img := func(path ...string) string {
		m := ch.Values
		for _, p := range path[:len(path)-1] {
			m, _ = m[p].(map[string]any)
		}
		s, _ := m[path[len(path)-1]].(string)
		return s
	}
	if ch.Metadata.AppVersion != v {
		return fmt.Errorf("packaged chart: appVersion %q, want %q", ch.Metadata.AppVersion, v)
	}
	for path, want := range map[string]string{
		"image.repository":           reg + "/" + v1alpha1.ControllerImageName,
		"deferPods.image.repository": reg + "/" + v1alpha1.StageImageName,
	} {
		if got := img(strings.Split(path, ".")...); got != want {
			return fmt.Errorf("packaged chart: %s %q, want %q", path, got, want)
		}
	}
	return nil
}

// registryClient is Helm's OCI client for reg, over plain HTTP where
// go-containerregistry would use it (a loopback or private address: the
// test registry), with the credentials of ~/.docker/config.json.
func registryClient(reg string) (*registry.Client, error) {
	r, err := name.NewRegistry(strings.SplitN(reg, "/", 2)[0])
	if err != nil {
		return nil, fmt.Errorf("registry %q: %w", reg, err)
	}
	opts := []registry.ClientOption{registry.ClientOptWriter(os.Stderr)}
	if r.Scheme() == "http" {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	return registry.NewClient(opts...)
}

// sourceDate is the time of every file in the released archives:
// SOURCE_DATE_EPOCH, else the commit's time, as the images' (test/images).
func sourceDate(root string) time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if sec, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(sec, 0).UTC()
		}
	}
	cmd := exec.Command("git", "log", "-1", "--format=%ct", "HEAD")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		if sec, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil {
			return time.Unix(sec, 0).UTC()
		}
	}
	return time.Unix(0, 0).UTC()
}
