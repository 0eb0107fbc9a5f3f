package envtest_test

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/envtest"
	"github.com/kdefer/kdefer/test/helmchart"
)

// TestNamespacedInstallRBAC: the RBAC of a namespaced install (the chart
// with watchNamespaces) on a real apiserver: every resource its
// ClusterRoles grant is cluster-scoped and every one its Roles grant is
// namespaced (discovery's word, not the chart's list), and kdefer's
// ServiceAccounts reach pods and runs in the served namespace only.
func TestNamespacedInstallRBAC(t *testing.T) {
	env := envtest.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"kdefer-system", "kdefer-node", "team-a", "tenant"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := helmchart.Render("watchNamespaces: [team-a]", "kdefer-system")
	if err != nil {
		t.Fatal(err)
	}
	var rbac []*unstructured.Unstructured
	for _, u := range envtest.DecodeObjects(t, out) {
		switch u.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac = append(rbac, u)
		}
	}
	envtest.Apply(t, env.Client, rbac...)

	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	namespaced := map[string]bool{} // "group/resource"
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			namespaced[gv.Group+"/"+strings.SplitN(r.Name, "/", 2)[0]] = r.Namespaced
		}
	}
	for _, u := range rbac {
		if u.GetKind() != "ClusterRole" && u.GetKind() != "Role" {
			continue
		}
		var rules []rbacv1.PolicyRule
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"rules": u.Object["rules"]}, &struct {
			Rules *[]rbacv1.PolicyRule `json:"rules"`
		}{&rules}); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(u.GetName(), "kdefer-manager") && !strings.HasPrefix(u.GetName(), "kdefer-node") {
			continue // the hand-written roles: by name, or for users
		}
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					key := g + "/" + strings.SplitN(res, "/", 2)[0]
					ns, known := namespaced[key]
					switch {
					case !known:
						t.Errorf("%s %s: %s is no resource of the apiserver", u.GetKind(), u.GetName(), key)
					case u.GetKind() == "ClusterRole" && ns:
						t.Errorf("ClusterRole %s grants the namespaced %s in every namespace", u.GetName(), key)
					case u.GetKind() == "Role" && !ns:
						t.Errorf("Role %s/%s grants the cluster-scoped %s, which a Role cannot", u.GetNamespace(), u.GetName(), key)
					}
				}
			}
		}
	}

	controller := env.Impersonate(t, kdeferSA, "system:serviceaccounts", "system:serviceaccounts:kdefer-system", "system:authenticated")
	agent := env.Impersonate(t, "system:serviceaccount:kdefer-node:kdefer-node", "system:serviceaccounts", "system:serviceaccounts:kdefer-node", "system:authenticated")
	check := func(what string, err error, allowed bool) {
		t.Helper()
		if apierrors.IsForbidden(err) == allowed {
			t.Errorf("%s: %v, want it %s", what, err, map[bool]string{true: "allowed", false: "Forbidden"}[allowed])
		}
	}
	for _, sa := range []struct {
		name string
		c    client.Client
	}{{"controller", controller}, {"node agent", agent}} {
		check(sa.name+": list pods in team-a", sa.c.List(ctx, &corev1.PodList{}, client.InNamespace("team-a")), true)
		check(sa.name+": list pods in tenant", sa.c.List(ctx, &corev1.PodList{}, client.InNamespace("tenant")), false)
		check(sa.name+": list pods everywhere", sa.c.List(ctx, &corev1.PodList{}), false)
		check(sa.name+": get a run in tenant", client.IgnoreNotFound(sa.c.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "x"}, &v1.DeferRun{})), false)
	}
	check("controller: list nodes", controller.List(ctx, &corev1.NodeList{}), true)
	check("controller: create a run in team-a", client.IgnoreAlreadyExists(controller.Create(ctx, &v1.DeferRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "x"}}, client.DryRunAll)), true)
	check("controller: create a run in tenant", controller.Create(ctx, &v1.DeferRun{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "x"}}, client.DryRunAll), false)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "x"}}
	check("controller: patch a Job in tenant", controller.Patch(ctx, job, client.RawPatch(types.MergePatchType, []byte(`{}`))), false)
}
