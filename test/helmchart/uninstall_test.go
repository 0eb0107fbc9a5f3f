package helmchart

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// splitHooks separates the chart's hooks (helm.sh/hook: objects helm makes
// around an install or uninstall, not part of it, so kustomize has no
// counterpart) from the objects it installs.
func splitHooks(m map[string]*unstructured.Unstructured) (installed, hooks map[string]*unstructured.Unstructured) {
	installed, hooks = map[string]*unstructured.Unstructured{}, map[string]*unstructured.Unstructured{}
	for k, u := range m {
		if _, ok := u.GetAnnotations()["helm.sh/hook"]; ok {
			hooks[k] = u
		} else {
			installed[k] = u
		}
	}
	return installed, hooks
}

// TestUninstallHook: the chart's pre-delete hook is a Job running
// `kdefer-controller uninstall` with uninstall.wait against the release's
// controller, and its ServiceAccount and deploy/uninstall's roles, made
// before it (a lower weight) and deleted with it; uninstall.hook=false
// renders none of it.
func TestUninstallHook(t *testing.T) {
	_, hooks := splitHooks(index(t, renderIn(t, "uninstall: {wait: 90s}", "batch-infra")))
	want := []string{
		"ClusterRole /kdefer-uninstall",
		"ClusterRoleBinding /kdefer-uninstall",
		"Job batch-infra/kdefer-uninstall",
		"Role batch-infra/kdefer-uninstall",
		"RoleBinding batch-infra/kdefer-uninstall",
		"ServiceAccount batch-infra/kdefer-uninstall",
	}
	if diff := cmp.Diff(want, keys(hooks)); diff != "" {
		t.Fatalf("hooks (-want +got):\n%s", diff)
	}
	for k, u := range hooks {
		a := u.GetAnnotations()
		if a["helm.sh/hook"] != "pre-delete" || !strings.Contains(a["helm.sh/hook-delete-policy"], "hook-succeeded") {
			t.Errorf("%s: annotations %v; want a pre-delete hook deleted when it succeeds", k, a)
		}
		if u.GetKind() != "Job" && a["helm.sh/hook-weight"] != "-10" {
			t.Errorf("%s: hook weight %q; want -10, before the Job's 0", k, a["helm.sh/hook-weight"])
		}
	}
	// The roles are deploy/uninstall's, in the release's namespace.
	gen := index(t, []byte(mustRead("deploy/uninstall/role.yaml")))
	for _, k := range []string{"ClusterRole /kdefer-uninstall", "Role kdefer-system/kdefer-uninstall"} {
		g := hooks[strings.Replace(k, "kdefer-system", "batch-infra", 1)]
		if diff := cmp.Diff(gen[k].Object["rules"], g.Object["rules"]); diff != "" {
			t.Errorf("%s: rules of deploy/uninstall (-) and the hook (+) differ:\n%s", k, diff)
		}
	}
	job := hooks["Job batch-infra/kdefer-uninstall"]
	cs, _, _ := unstructured.NestedSlice(job.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	for _, a := range []string{"uninstall", "--wait=90s", "--controller-namespace=batch-infra", "--controller-deployment=kdefer-controller"} {
		if !slices.Contains(args, a) {
			t.Errorf("hook Job args %v; want %s", args, a)
		}
	}

	_, hooks = splitHooks(index(t, render(t, "uninstall: {hook: false}")))
	if len(hooks) > 0 {
		t.Errorf("uninstall.hook=false renders hooks %v", keys(hooks))
	}
}
