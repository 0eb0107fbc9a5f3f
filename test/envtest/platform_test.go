package envtest_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/test/envtest"
)

// testClusterPolicy: a ClusterDeferPolicy arms the plain Jobs (no kdefer
// label or annotation) of the namespaces it selects, through the namespace
// label the namespace webhook sets as they are created; Jobs elsewhere, and
// those that opt out, pass as written; a locked policy refuses the opt-out;
// two policies selecting one Job refuse it.
func testClusterPolicy(t *testing.T, env *envtest.Env, policies cache.Cache) {
	ctx := context.Background()
	pol := &v1.ClusterDeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: "physics"}}
	pol.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: map[string]string{"site": "physics"}}
	pol.Spec.StageOut = &v1.StageOut{URL: "s3://platform/{namespace}/{job}/{pod}/"}
	pol.Spec.Credentials = &corev1.LocalObjectReference{Name: "platform-s3"}
	must(t, env.Client.Create(ctx, pol))
	waitForCluster(t, policies, 1)

	selected := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "physics-a", Labels: map[string]string{"site": "physics"}}}
	must(t, env.Client.Create(ctx, selected))
	if got := selected.Labels[v1.LabelPlatformPolicy]; got != "physics" {
		t.Fatalf("namespace %s created with label %s=%q, want physics (the namespace webhook)", selected.Name, v1.LabelPlatformPolicy, got)
	}
	other := namespace(t, env, "chemistry")
	plain := func(name, ns string) *rt.JobWrapper { return rt.MakeJob(name, ns).NoLabel(v1.LabelEnabled) }

	t.Run("a plain Job of a selected namespace is armed", func(t *testing.T) {
		job := plain("plain", selected.Name).Obj()
		must(t, env.Client.Create(ctx, job))
		if job.Labels[v1.LabelEnabled] != "true" || job.Spec.Template.Annotations[v1.AnnotationClusterPolicy] != "physics" ||
			job.Spec.Template.Annotations[v1.AnnotationRendered] == "" {
			t.Errorf("Job not armed by the ClusterDeferPolicy: labels %v, template annotations %v", job.Labels, job.Spec.Template.Annotations)
		}
	})

	t.Run("Jobs elsewhere, and those that opt out, pass as written", func(t *testing.T) {
		for _, job := range []*rt.JobWrapper{plain("plain", other), plain("skip", selected.Name).Annotation(v1.AnnotationSkip, "true")} {
			obj := job.Obj()
			must(t, env.Client.Create(ctx, obj))
			if obj.Labels[v1.LabelEnabled] != "" || obj.Spec.Template.Annotations[v1.AnnotationRendered] != "" {
				t.Errorf("Job %s/%s changed: labels %v, template annotations %v", obj.Namespace, obj.Name, obj.Labels, obj.Spec.Template.Annotations)
			}
		}
	})

	t.Run("a namespace that labels itself is unlabelled", func(t *testing.T) {
		self := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "self-selected", Labels: map[string]string{v1.LabelPlatformPolicy: "physics"}}}
		must(t, env.Client.Create(ctx, self))
		if _, ok := self.Labels[v1.LabelPlatformPolicy]; ok {
			t.Errorf("namespace %s keeps label %s no policy's selector gives it", self.Name, v1.LabelPlatformPolicy)
		}
	})

	t.Run("a locked policy refuses the opt-out and another named policy", func(t *testing.T) {
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(pol), pol))
		pol.Spec.Locked = []v1.LockedField{v1.LockedStageOut}
		must(t, env.Client.Update(ctx, pol))
		waitUntil(t, "the cache to see the lock", func() bool {
			var cur v1.ClusterDeferPolicy
			return policies.Get(ctx, client.ObjectKeyFromObject(pol), &cur) == nil && len(cur.Spec.Locked) == 1
		})
		wantDenied(t, env.Client.Create(ctx, plain("skip-locked", selected.Name).Annotation(v1.AnnotationSkip, "true").Obj()),
			`admission webhook "render.platform-jobs.kdefer.io" denied the request`,
			`annotation kdefer.io/skip: opts out, but ClusterDeferPolicy "physics" selects namespace physics-a and locks stageOut (spec.locked)`)
		wantDenied(t, env.Client.Create(ctx, rt.MakeJob("named", selected.Name).Annotation(v1.AnnotationPolicy, "team").Obj()),
			`annotation kdefer.io/policy: names DeferPolicy "team", but ClusterDeferPolicy "physics" selects namespace physics-a`)
	})

	t.Run("two policies selecting one Job refuse it", func(t *testing.T) {
		also := &v1.ClusterDeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: "also"}}
		also.Spec.StageOut = &v1.StageOut{URL: "s3://also/{pod}/"}
		must(t, env.Client.Create(ctx, also))
		t.Cleanup(func() { _ = env.Client.Delete(ctx, also) })
		waitForCluster(t, policies, 2)
		wantDenied(t, env.Client.Create(ctx, plain("two", selected.Name).Obj()),
			"2 ClusterDeferPolicies select this Job of namespace physics-a: also, physics; fix: narrow their spec.namespaceSelector or spec.jobSelector")
	})

	t.Run("validation", func(t *testing.T) {
		bad := &v1.ClusterDeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bad"}}
		bad.Spec.NamespaceDefault = true
		bad.Spec.StageOut = &v1.StageOut{URL: "s3://b/{pod}/"}
		wantDenied(t, env.Client.Create(ctx, bad), "spec.namespaceDefault is a DeferPolicy's field")
		bad.Spec.NamespaceDefault = false
		bad.Spec.NamespaceSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "site", Operator: "Exists", Values: []string{"x"}}}
		wantDenied(t, env.Client.Create(ctx, bad), `admission webhook "validate.clusterdeferpolicies.kdefer.io" denied the request`, "spec.namespaceSelector.matchExpressions[0].values")
	})
	must(t, env.Client.Delete(ctx, pol))
}

// waitForCluster waits until the webhooks' cache holds n ClusterDeferPolicies.
func waitForCluster(t *testing.T, policies cache.Cache, n int) {
	t.Helper()
	waitUntil(t, "the cache to hold the ClusterDeferPolicies", func() bool {
		var list v1.ClusterDeferPolicyList
		return policies.List(context.Background(), &list) == nil && len(list.Items) == n
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
