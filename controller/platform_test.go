package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/resolve"
)

func platformPolicy(name string, sel map[string]string) *v1.ClusterDeferPolicy {
	p := &v1.ClusterDeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
	p.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: sel}
	p.Spec.StageOut = &v1.StageOut{URL: "s3://platform/" + name + "/{pod}/"}
	p.Spec.Credentials = &corev1.LocalObjectReference{Name: "platform-s3"}
	return p
}

// TestRunForClusterPolicy: a pod is armed with the ClusterDeferPolicy
// admission recorded on it while the policy selects the namespace; one that no longer does is a
// ConfigError naming it, and a pod with nothing recorded is not armed with
// any (its jobSelector was the Job's to pass).
func TestRunForClusterPolicy(t *testing.T) {
	physics := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{"site": "physics"}}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(physics,
		platformPolicy("plat", map[string]string{"site": "physics"}), platformPolicy("gone", map[string]string{"site": "chemistry"})).
		WithIndex(&v1.DeferPolicy{}, resolve.IndexNamespaceDefault, resolve.NamespaceDefaultIndex).Build()
	bare := func(name, recorded string) *corev1.Pod {
		p := kt.MakePod(name, "ns")
		delete(p.Annotations, v1.AnnotationStageOut)
		if recorded != "" {
			p.Annotation(v1.AnnotationClusterPolicy, recorded)
		}
		return p.Obj()
	}
	run, err := RunFor(context.Background(), c, bare("armed", "plat"))
	if err != nil {
		t.Fatal(err)
	}
	if run.Spec.PolicyName != "plat" || run.Annotations[annotationConfigError] != "" {
		t.Errorf("run armed with %q (config error %q), want plat", run.Spec.PolicyName, run.Annotations[annotationConfigError])
	}
	if so, cr := run.Spec.Policy.StageOut, run.Spec.Policy.Credentials; so == nil || so.URL != "s3://platform/plat/{pod}/" || cr == nil || cr.Name != "platform-s3" {
		t.Errorf("policy snapshot %+v: want the ClusterDeferPolicy's URL and credentials", run.Spec.Policy)
	}
	run, err = RunFor(context.Background(), c, bare("moved", "gone"))
	if err != nil {
		t.Fatal(err)
	}
	if got := run.Annotations[annotationConfigError]; !strings.Contains(got, `ClusterDeferPolicy "gone", which no longer exists or no longer selects namespace ns`) {
		t.Errorf("config error %q, want the policy that no longer selects the namespace named", got)
	}
	if run.Annotations[v1.AnnotationClusterPolicy] != "gone" {
		t.Errorf("the waiting run lost the recorded policy: annotations %v", run.Annotations)
	}
	run, err = RunFor(context.Background(), c, bare("unrecorded", ""))
	if err != nil {
		t.Fatal(err)
	}
	if run.Spec.PolicyName != "" {
		t.Errorf("a pod with no recorded ClusterDeferPolicy armed with %q", run.Spec.PolicyName)
	}
}

// TestPlatformReconciler: a selected namespace is labelled, kdefer's own
// namespace never; once the namespace is no longer selected (or labels
// itself), the label goes.
func TestPlatformReconciler(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "physics-a", Labels: map[string]string{"site": "physics"}}}
	own := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kdefer-system", Labels: map[string]string{"site": "physics"}}}
	pol := platformPolicy("plat", map[string]string{"site": "physics"})
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(ns, own, pol).Build()
	r := NewPlatformReconciler(c, PlatformOptions{Namespace: "kdefer-system"})
	reconcileNS := func(name string) {
		t.Helper()
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(obj client.Object) {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
	}
	reconcileNS("physics-a")
	reconcileNS("kdefer-system")
	get(ns)
	if ns.Labels[v1.LabelPlatformPolicy] != "plat" {
		t.Errorf("selected namespace labels %v, want %s=plat", ns.Labels, v1.LabelPlatformPolicy)
	}
	get(own)
	if _, ok := own.Labels[v1.LabelPlatformPolicy]; ok {
		t.Errorf("kdefer's own namespace labelled: %v", own.Labels)
	}
	ns.Labels = map[string]string{v1.LabelPlatformPolicy: "plat"}
	if err := c.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}
	reconcileNS("physics-a")
	get(ns)
	if _, ok := ns.Labels[v1.LabelPlatformPolicy]; ok {
		t.Errorf("namespace no longer selected keeps label %s", v1.LabelPlatformPolicy)
	}
}
