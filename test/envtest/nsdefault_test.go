package envtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/resolve"
	"github.com/kdefer/kdefer/test/envtest"
)

// testNamespaceDefault: a namespace's default DeferPolicy applies to the
// Jobs, pods and CronJobs that name none, and with locks no Job steps
// around it, by naming another policy or by annotation.
func testNamespaceDefault(t *testing.T, env *envtest.Env, policies cache.Cache) {
	ctx := context.Background()
	ns := namespace(t, env, "platform")
	// Not a default: what a Job might try to name instead.
	must(t, env.Client.Create(ctx, rt.MakePolicy("team", ns, "s3://team/{pod}/").Credentials("team-creds").Obj()))
	def := rt.MakePolicy("platform", ns, "s3://platform/{namespace}/{pod}/").NamespaceDefault().
		Credentials("platform-creds").StageIn("s3://approved/inputs/", "").
		Locked(v1.LockedStageIn, v1.LockedCredentials).Obj()
	must(t, env.Client.Create(ctx, def))
	waitForDefault(t, policies, ns, "platform")

	t.Run("a Job naming no policy gets the default", func(t *testing.T) {
		job := rt.MakeJob("plain", ns).Obj()
		must(t, env.Client.Create(ctx, job))
		init := job.Spec.Template.Spec.InitContainers
		if len(init) != 1 || len(init[0].EnvFrom) != 1 || init[0].EnvFrom[0].SecretRef.Name != "platform-creds" ||
			!strings.Contains(strings.Join(init[0].Args, " "), "s3://approved/inputs/") {
			t.Errorf("template not rendered with the default's stage-in and credentials: %+v", init)
		}
	})

	t.Run("a Job naming another policy is refused", func(t *testing.T) {
		job := rt.MakeJob("elsewhere", ns).Annotation(v1.AnnotationPolicy, "team").Obj()
		wantDenied(t, env.Client.Create(ctx, job), `admission webhook "render.jobs.kdefer.io" denied the request`,
			`annotation kdefer.io/policy: names DeferPolicy "team", but DeferPolicy "platform" is the default of namespace platform`,
			"locks stageIn, credentials (spec.locked)", `fix: remove the annotation (or set it to "platform")`)
		// Named in the pod template, as kdefer.io/policy may be.
		job = rt.MakeJob("elsewhere-tmpl", ns).TemplateAnnotation(v1.AnnotationPolicy, "team").Obj()
		wantDenied(t, env.Client.Create(ctx, job), `names DeferPolicy "team", but DeferPolicy "platform" is the default`)
		// Naming the default itself is naming no other.
		if err := env.Client.Create(ctx, rt.MakeJob("named", ns).Annotation(v1.AnnotationPolicy, "platform").Obj()); err != nil {
			t.Errorf("a Job naming the default: %v", err)
		}
	})

	t.Run("a Job setting a locked annotation is refused", func(t *testing.T) {
		job := rt.MakeJob("own-secret", ns).Annotation(v1.AnnotationCredentials, "platform-creds").
			Annotation(v1.AnnotationStageIn, "s3://anywhere/").Obj()
		wantDenied(t, env.Client.Create(ctx, job),
			"annotation kdefer.io/credentials: overrides the DeferPolicy's credentials, which the policy locks (spec.locked)",
			"annotation kdefer.io/stage-in: overrides the DeferPolicy's stageIn, which the policy locks (spec.locked)",
			"fix: remove the annotation")
		// An unlocked field is the Job's to set.
		if err := env.Client.Create(ctx, rt.MakeJob("own-dest", ns).StageOut("s3://mine/{pod}/").Obj()); err != nil {
			t.Errorf("a Job overriding an unlocked field of the default: %v", err)
		}
	})

	t.Run("pods and CronJobs are bound the same", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: ns, Labels: map[string]string{v1.LabelEnabled: "true"},
			Annotations: map[string]string{v1.AnnotationPolicy: "team"}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "build", Image: "busybox"}}}}
		wantDenied(t, env.Client.Create(ctx, pod), "kdefer cannot manage this pod", `names DeferPolicy "team", but DeferPolicy "platform" is the default`)
		job := rt.MakeJob("x", ns).Annotation(v1.AnnotationPolicy, "team").Obj()
		cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
			Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: job.Labels, Annotations: job.Annotations}, Spec: job.Spec}}}
		wantDenied(t, env.Client.Create(ctx, cj), "kdefer would refuse every Job of this CronJob", `names DeferPolicy "team", but DeferPolicy "platform" is the default`)
	})

	t.Run("a second default is refused", func(t *testing.T) {
		second := rt.MakePolicy("second", ns, "s3://second/{pod}/").NamespaceDefault().Obj()
		wantDenied(t, env.Client.Create(ctx, second), `admission webhook "validate.deferpolicies.kdefer.io" denied the request`,
			"spec.namespaceDefault: Forbidden: DeferPolicy platform is already the default of namespace platform",
			"fix: set namespaceDefault: false here, or first on platform")
		// The default itself may change.
		var cur v1.DeferPolicy
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(def), &cur))
		cur.Spec.Deadline = &metav1.Duration{Duration: time.Hour}
		if err := env.Client.Update(ctx, &cur); err != nil {
			t.Errorf("updating the default: %v", err)
		}
	})

	t.Run("without locks the default is just a default", func(t *testing.T) {
		open := namespace(t, env, "open")
		must(t, env.Client.Create(ctx, rt.MakePolicy("team", open, "s3://team/{pod}/").Obj()))
		must(t, env.Client.Create(ctx, rt.MakePolicy("usual", open, "s3://usual/{pod}/").NamespaceDefault().Obj()))
		waitForDefault(t, policies, open, "usual")
		if err := env.Client.Create(ctx, rt.MakeJob("other", open).Annotation(v1.AnnotationPolicy, "team").Obj()); err != nil {
			t.Errorf("a Job naming another policy than an unlocked default: %v", err)
		}
		if err := env.Client.Create(ctx, rt.MakeJob("plain", open).Obj()); err != nil {
			t.Errorf("a Job naming none, with the default's stage-out: %v", err)
		}
	})
}

// waitForDefault waits until the webhooks' cache sees name as the default of
// namespace ns, as the manager's cache does shortly after it is created.
func waitForDefault(t *testing.T, policies cache.Cache, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var list v1.DeferPolicyList
		must(t, policies.List(context.Background(), &list, client.InNamespace(ns), client.MatchingFields{resolve.IndexNamespaceDefault: "true"}))
		if len(list.Items) == 1 && list.Items[0].Name == name {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache does not see DeferPolicy %s/%s as the default: %d defaults", ns, name, len(list.Items))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
