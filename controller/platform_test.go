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
// admission recorded on it, with the namespace's copy of its credentials,
// while the policy selects the namespace; one that no longer does is a
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
	if so, cr := run.Spec.Policy.StageOut, run.Spec.Policy.Credentials; so == nil || so.URL != "s3://platform/plat/{pod}/" || cr == nil || cr.Name != "kdefer-plat-credentials" {
		t.Errorf("policy snapshot %+v: want the ClusterDeferPolicy's URL and the namespace's copy of its credentials", run.Spec.Policy)
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

// TestPlatformReconciler: a selected namespace is labelled and gets a copy
// of the policy's credentials, owned by the policy; kdefer's own namespace
// never; a Secret of the copy's name that is not kdefer's is left alone;
// once the namespace is no longer selected, the label and the copy go.
func TestPlatformReconciler(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "physics-a", Labels: map[string]string{"site": "physics"}}}
	own := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kdefer-system", Labels: map[string]string{"site": "physics"}}}
	theirs := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Labels: map[string]string{"site": "physics"}}}
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "platform-s3", Namespace: "kdefer-system"}, Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("k")}}
	mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kdefer-plat-credentials", Namespace: "theirs"}, Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("theirs")}}
	pol := platformPolicy("plat", map[string]string{"site": "physics"})
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(ns, own, theirs, src, mine, pol).Build()
	r := NewPlatformReconciler(c, c, PlatformOptions{Namespace: "kdefer-system"})
	reconcileNS := func(name string) {
		t.Helper()
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"physics-a", "kdefer-system", "theirs"} {
		reconcileNS(n)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(ns), ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels[v1.LabelPlatformPolicy] != "plat" {
		t.Errorf("selected namespace labels %v, want %s=plat", ns.Labels, v1.LabelPlatformPolicy)
	}
	cp := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "physics-a", Name: "kdefer-plat-credentials"}, cp); err != nil {
		t.Fatal(err)
	}
	if string(cp.Data["AWS_ACCESS_KEY_ID"]) != "k" || cp.Labels[v1.LabelCredentialsOf] != "plat" || len(cp.OwnerReferences) != 1 || cp.OwnerReferences[0].Name != "plat" {
		t.Errorf("copy %+v: want the source's data, labelled and owned by the policy", cp)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(own), own); err != nil {
		t.Fatal(err)
	}
	if _, ok := own.Labels[v1.LabelPlatformPolicy]; ok {
		t.Errorf("kdefer's own namespace labelled: %v", own.Labels)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(mine), mine); err != nil {
		t.Fatal(err)
	}
	if string(mine.Data["AWS_ACCESS_KEY_ID"]) != "theirs" {
		t.Errorf("the namespace's own Secret was overwritten: %v", mine.Data)
	}

	ns.Labels = map[string]string{v1.LabelPlatformPolicy: "plat"}
	if err := c.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}
	reconcileNS("physics-a")
	if err := c.Get(ctx, client.ObjectKeyFromObject(ns), ns); err != nil {
		t.Fatal(err)
	}
	if _, ok := ns.Labels[v1.LabelPlatformPolicy]; ok {
		t.Errorf("namespace no longer selected keeps label %s", v1.LabelPlatformPolicy)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cp), cp); err == nil {
		t.Error("the credentials copy stays in a namespace no longer selected")
	}
	reconcileNS("theirs")
	if err := c.Get(ctx, client.ObjectKeyFromObject(mine), mine); err != nil {
		t.Errorf("the namespace's own Secret of the copy's name: %v", err)
	}
}
