package helmchart

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kdefer/kdefer/internal/version"
	"github.com/kdefer/kdefer/test/repo"
)

// TestDefaultsNameTheRelease: the chart's appVersion is the binaries'
// version, its version the same without the v, and the chart's and
// deploy/'s default images are the ones a release of that version publishes
// (internal/version's Registry), so that an install with no image values
// pulls what the release pushed.
func TestDefaultsNameTheRelease(t *testing.T) {
	ch, err := loader.LoadDir(filepath.Join(repo.MustRoot(), chartDir))
	if err != nil {
		t.Fatal(err)
	}
	if got := ch.Metadata.AppVersion; got != version.Version {
		t.Errorf("Chart.yaml appVersion %q, want internal/version.Version %q", got, version.Version)
	}
	if got, want := ch.Metadata.Version, strings.TrimPrefix(version.Version, "v"); got != want {
		t.Errorf("Chart.yaml version %q, want %q (appVersion without the v)", got, want)
	}
	controller := version.Registry + "/kdefer-controller:" + version.Version
	stage := "--stage-image=" + version.Registry + "/kdefer-stage:" + version.Version
	for what, data := range map[string][]byte{
		"kustomize build deploy":       kustomize(t, "deploy"),
		"helm template with no values": render(t, ""),
	} {
		seen := 0
		for _, u := range decode(t, data) {
			if u.GetKind() != "Deployment" && u.GetKind() != "DaemonSet" {
				continue
			}
			var tmpl corev1.PodTemplateSpec
			m, _, _ := unstructured.NestedMap(u.Object, "spec", "template")
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &tmpl); err != nil {
				t.Fatal(err)
			}
			for _, c := range tmpl.Spec.Containers {
				seen++
				if c.Image != controller {
					t.Errorf("%s: %s %s container %s: image %q, want %q", what, u.GetKind(), u.GetName(), c.Name, c.Image, controller)
				}
				if u.GetKind() == "Deployment" && !slices.Contains(c.Args, stage) {
					t.Errorf("%s: %s args %q, want %s", what, u.GetName(), c.Args, stage)
				}
			}
		}
		if seen != 2 {
			t.Errorf("%s: %d containers in the Deployment and DaemonSet, want 2", what, seen)
		}
	}
}
