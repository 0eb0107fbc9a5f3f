package helmchart

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// namespacedValues are a namespaced install's: kdefer serves two namespaces.
const namespacedValues = `
namespace: {create: true}
watchNamespaces: [team-a, team-b]
`

// TestNamespacedInstall: with watchNamespaces, the chart narrows what it
// installs for the namespaces listed, and nothing else. There is no
// kustomize variant of this mode (TestChartMatchesKustomize covers the
// cluster-wide install of each variant); instead each difference is checked
// here against the cluster-wide objects it derives from: the generated
// ClusterRoles split by resource, losing and adding no permission, and every
// webhook kept but for its namespaceSelector.
func TestNamespacedInstall(t *testing.T) {
	served := []string{"team-a", "team-b"}
	wide := index(t, render(t, variants[0].values))
	got := index(t, render(t, namespacedValues))

	for _, gen := range []struct{ file, serviceAccount string }{
		{"deploy/rbac/role.yaml", "kdefer-system/kdefer-controller"},
		{"deploy/node-agent/role.yaml", "kdefer-node/kdefer-node"},
	} {
		var generated *rbacv1.ClusterRole
		for _, u := range decode(t, []byte(mustRead(gen.file))) {
			if u.GetKind() == "ClusterRole" {
				generated = &rbacv1.ClusterRole{}
				convert(t, u, generated)
			}
		}
		if generated == nil {
			t.Fatalf("%s: no ClusterRole", gen.file)
		}
		name := generated.Name
		cr := &rbacv1.ClusterRole{}
		convert(t, mustGet(t, got, "ClusterRole /"+name), cr)
		clusterWide := grants(cr.Rules)
		for _, g := range clusterWide {
			if !clusterScoped(g) {
				t.Errorf("ClusterRole %s grants %s cluster-wide in a namespaced install", name, g)
			}
		}
		for _, ns := range served {
			role := &rbacv1.Role{}
			convert(t, mustGet(t, got, "Role "+ns+"/"+name+"-namespace"), role)
			inNS := grants(role.Rules)
			if diff := cmp.Diff(grants(generated.Rules), sorted(append(slices.Clone(clusterWide), inNS...))); diff != "" {
				t.Errorf("%s: the ClusterRole %s and the Role in %s (+) are not the generated ClusterRole (-) split:\n%s", gen.file, name, ns, diff)
			}
			rb := &rbacv1.RoleBinding{}
			convert(t, mustGet(t, got, "RoleBinding "+ns+"/"+name+"-namespace"), rb)
			if len(rb.Subjects) != 1 || rb.Subjects[0].Namespace+"/"+rb.Subjects[0].Name != gen.serviceAccount || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name {
				t.Errorf("RoleBinding %s/%s: %+v to %+v, want %s to Role %s", ns, rb.Name, rb.Subjects, rb.RoleRef, gen.serviceAccount, role.Name)
			}
		}
	}

	for _, k := range []string{"MutatingWebhookConfiguration /kdefer", "ValidatingWebhookConfiguration /kdefer"} {
		w, g := mustGet(t, wide, k).DeepCopy(), mustGet(t, got, k)
		hooks, _, _ := unstructured.NestedSlice(w.Object, "webhooks")
		for _, h := range hooks {
			// The served namespaces are added to a webhook's own selector.
			own, _, _ := unstructured.NestedSlice(h.(map[string]any), "namespaceSelector", "matchExpressions")
			h.(map[string]any)["namespaceSelector"] = map[string]any{"matchExpressions": append(own, map[string]any{
				"key": "kubernetes.io/metadata.name", "operator": "In", "values": []any{"team-a", "team-b"}})}
		}
		if err := unstructured.SetNestedSlice(w.Object, hooks, "webhooks"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w.Object, g.Object); diff != "" {
			t.Errorf("%s: want the cluster-wide webhooks, each with a namespaceSelector on the served namespaces (-), got (+):\n%s", k, diff)
		}
	}

	for _, k := range []string{"Deployment kdefer-system/kdefer-controller", "DaemonSet kdefer-node/kdefer-node"} {
		args, _, _ := unstructured.NestedSlice(mustGet(t, got, k).Object, "spec", "template", "spec", "containers")
		if c := args[0].(map[string]any); !slices.Contains(c["args"].([]any), any("--namespaces=team-a,team-b")) {
			t.Errorf("%s: args %v, want --namespaces=team-a,team-b", k, c["args"])
		}
	}

	// What the namespaced install adds, and nothing else; none of it in
	// the cluster-wide install.
	var added []string
	for k := range got {
		if _, ok := wide[k]; !ok {
			added = append(added, k)
		}
	}
	want := []string{}
	for _, ns := range served {
		for _, n := range []string{"kdefer-manager", "kdefer-node"} {
			want = append(want, "Role "+ns+"/"+n+"-namespace", "RoleBinding "+ns+"/"+n+"-namespace")
		}
	}
	if diff := cmp.Diff(sorted(want), sorted(added)); diff != "" {
		t.Errorf("objects only the namespaced install has (-want +got):\n%s", diff)
	}
	for k := range wide {
		if _, ok := got[k]; !ok {
			t.Errorf("%s: missing from the namespaced install", k)
		}
	}

	_, err := renderErr(t, "watchNamespaces: [Team_A]", namespace)
	if err == nil || !strings.Contains(err.Error(), `watchNamespaces: "Team_A" is not a namespace name`) {
		t.Errorf("watchNamespaces: [Team_A]: %v, want an error naming the value", err)
	}
}

// grants are a role's rules as one "group resource verb" each, sorted.
func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			out = append(out, "unexpected rule "+r.String())
			continue
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, g+" "+res+" "+v)
				}
			}
		}
	}
	return sorted(out)
}

// clusterScoped: a grant of a resource that has no namespace. The chart
// knows its list too (kdefer.servedNamespacesRBAC); TestNamespacedInstallRBAC
// (test/envtest) checks both against an apiserver's discovery.
func clusterScoped(grant string) bool {
	res := strings.SplitN(strings.Split(grant, " ")[1], "/", 2)[0]
	return slices.Contains([]string{"nodes", "persistentvolumes", "namespaces", "tokenreviews", "subjectaccessreviews", "clusterdeferpolicies"}, res)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func mustGet(t *testing.T, objs map[string]*unstructured.Unstructured, k string) *unstructured.Unstructured {
	t.Helper()
	u, ok := objs[k]
	if !ok {
		t.Fatalf("no %s", k)
	}
	return u
}

func convert(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("%s: %v", key(u), err)
	}
}
