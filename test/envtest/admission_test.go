package envtest_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/certs"
	kwebhook "github.com/kdefer/kdefer/controller/webhook"
	"github.com/kdefer/kdefer/render"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/test/envtest"
)

// TestAdmission runs against one real apiserver: the CRDs' validation, the
// webhooks served in-process, the retained-volume admission policy from
// deploy/, and `kubectl apply -k deploy/`'s objects (last: it replaces the
// webhook configurations).
func TestAdmission(t *testing.T) {
	env := envtest.Start(t, envtest.WithWebhooks())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	serveWebhooks(t, ctx, env)

	t.Run("CRDValidation", func(t *testing.T) { testCRDValidation(t, env) })
	t.Run("Webhooks", func(t *testing.T) { testWebhooks(t, env) })
	t.Run("CronJobs", func(t *testing.T) { testCronJobs(t, env) })
	t.Run("RetainWorkVolumes", func(t *testing.T) { testRetainPolicy(t, env) })
	t.Run("Kustomize", func(t *testing.T) { testKustomize(t, env) })
}

var renderOpts = render.Options{StageImage: "kdefer.io/kdefer-stage:test"}

func serveWebhooks(t *testing.T, ctx context.Context, env *envtest.Env) {
	t.Helper()
	wio := env.WebhookInstallOptions
	srv := webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir})
	kwebhook.Register(srv, kwebhook.NewHandlers(kwebhook.Options{Render: renderOpts}, env.Client))
	(&kwebhook.PVCArmer{Client: env.Client, Reader: env.Client}).Register(srv)
	go func() {
		if err := srv.Start(ctx); err != nil {
			t.Errorf("webhook server: %v", err)
		}
	}()
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook server not up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func namespace(t *testing.T, env *envtest.Env, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

func wantDenied(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("request allowed, want a denial containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("denial does not contain %q:\n%v", p, err)
		}
	}
}

func testCRDValidation(t *testing.T, env *envtest.Env) {
	ctx := context.Background()
	ns := namespace(t, env, "crd")
	// Bypass the webhook to reach the CRD's own rules: webhooks only add to them.
	cases := []struct {
		name string
		spec v1.DeferPolicySpec
		want string
	}{
		{name: "nothing to do", spec: v1.DeferPolicySpec{}, want: "a policy needs stageOut or at least one entry in deferContainers"},
		{name: "url scheme", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "http://x"}}, want: "stageOut.url must start with s3://"},
		{name: "path", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x", Path: "../up"}}, want: "stageOut.path must be relative to the work volume and must not contain '..'"},
		{name: "volume name", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, WorkVolume: v1.WorkVolume{Name: "Bad_Name"}}, want: "workVolume.name must be a DNS label"},
		{name: "mount path", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, WorkVolume: v1.WorkVolume{MountPath: "rel"}}, want: "workVolume.mountPath must be absolute"},
		{name: "retainFor", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, OnFailure: &v1.OnFailure{Volume: v1.VolumeRelease, RetainFor: &metav1.Duration{Duration: time.Hour}}}, want: "onFailure.retainFor is only allowed with volume: Retain"},
		{name: "stageOut locked but unset", spec: v1.DeferPolicySpec{DeferContainers: []corev1.Container{{Name: "c", Image: "busybox"}}, Locked: []v1.LockedField{v1.LockedStageOut}},
			want: "spec.locked holds stageOut but spec.stageOut is not set: set spec.stageOut.url"},
		{name: "locked enum", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, Locked: []v1.LockedField{"deadline"}}, want: `spec.locked[0]: Unsupported value: "deadline"`},
		{name: "trigger enum", spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}, TriggerRules: []v1.TriggerRule{{Triggers: []v1.Trigger{"Exploded"}}}}, want: `spec.triggerRules[0].triggers[0]: Unsupported value: "Exploded"`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.DeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: ns}, Spec: tc.spec}
			wantDenied(t, env.Client.Create(ctx, p), tc.want)
		})
	}
	// DeferRun identity is immutable; the trigger (in status) is set once.
	run := &v1.DeferRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns},
		Spec: v1.DeferRunSpec{PodName: "p", PodUID: types.UID("u1"), Policy: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x"}}}}
	if err := env.Client.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	run.Spec.PodName = "other"
	wantDenied(t, env.Client.Update(ctx, run), "spec.podName is immutable")
	run.Spec.PodName = "p"
	run.Status.Trigger = v1.TriggerOOMKilled
	if err := env.Client.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}
	run.Status.Trigger = v1.TriggerSucceeded
	wantDenied(t, env.Client.Status().Update(ctx, run), "status.trigger cannot change once set")
}

func testWebhooks(t *testing.T, env *envtest.Env) {
	ctx := context.Background()
	ns := namespace(t, env, "jobs")

	t.Run("rendered on create", func(t *testing.T) {
		job := rt.MakeJob("sim", ns).StageOut("s3://results/{job}/{pod}/").
			Annotation(v1.AnnotationCredentials, "minio").Annotation(v1.AnnotationStageIn, "s3://inputs/sim/").Obj()
		sent := job.DeepCopy()
		if err := env.Client.Create(ctx, job); err != nil {
			t.Fatalf("create: %v", err)
		}
		got := &batchv1.Job{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
			t.Fatal(err)
		}
		tmpl := got.Spec.Template
		if tmpl.Labels[v1.LabelManaged] != "true" || !contains(tmpl.Finalizers, v1.PodFinalizer) || tmpl.Annotations[v1.AnnotationRendered] == "" {
			t.Errorf("template not rendered: labels %v finalizers %v annotations %v", tmpl.Labels, tmpl.Finalizers, tmpl.Annotations)
		}
		if len(tmpl.Spec.InitContainers) != 1 || tmpl.Spec.InitContainers[0].Name != render.StageInContainerName ||
			tmpl.Spec.InitContainers[0].EnvFrom[0].SecretRef.Name != "minio" {
			t.Errorf("stage-in init container missing or without credentials: %+v", tmpl.Spec.InitContainers)
		}
		for _, c := range tmpl.Spec.Containers {
			if len(c.EnvFrom) > 0 {
				t.Errorf("main container %s receives envFrom %v", c.Name, c.EnvFrom)
			}
		}
		vol := tmpl.Spec.Volumes[len(tmpl.Spec.Volumes)-1]
		if vol.Ephemeral == nil || vol.Ephemeral.VolumeClaimTemplate.Labels[v1.LabelWorkVolume] != v1.DefaultWorkVolumeName {
			t.Errorf("work volume %+v", vol)
		}
		// What the apiserver stored equals render's output on what was sent,
		// apart from the apiserver's own defaulting.
		want, err := render.Job(sent, nil, renderOpts)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.Spec.Template.Spec.InitContainers[0].Args, tmpl.Spec.InitContainers[0].Args); diff != "" {
			t.Errorf("stage-in args (-render +stored):\n%s", diff)
		}
		// A metadata update of the running Job (e.g. kdefer skip) passes.
		got.Annotations[v1.AnnotationSkip] = "true"
		if err := env.Client.Update(ctx, got); err != nil {
			t.Errorf("annotating the Job: %v", err)
		}
	})

	t.Run("locked policy", func(t *testing.T) {
		policy := rt.MakePolicy("locked", ns, "s3://team/{job}/{pod}/").Credentials("team-creds").Obj()
		policy.Spec.Locked = []v1.LockedField{v1.LockedStageOut, v1.LockedCredentials}
		if err := env.Client.Create(ctx, policy); err != nil {
			t.Fatal(err)
		}
		job := rt.MakeJob("redirect", ns).Annotation(v1.AnnotationPolicy, "locked").
			Annotation(v1.AnnotationStageOut, "s3://elsewhere/{pod}/").Annotation(v1.AnnotationCredentials, "mine").Obj()
		wantDenied(t, env.Client.Create(ctx, job), v1.AnnotationStageOut, v1.AnnotationCredentials,
			"which the policy locks (spec.locked)", "remove the annotation")
		ok := rt.MakeJob("obeys", ns).Annotation(v1.AnnotationPolicy, "locked").Annotation(v1.AnnotationDeadline, "1h").Obj()
		if err := env.Client.Create(ctx, ok); err != nil {
			t.Errorf("a Job overriding only unlocked fields: %v", err)
		}
	})

	t.Run("policy", func(t *testing.T) {
		policy := rt.MakePolicy("team", ns, "s3://team/{job}/{pod}/").Credentials("team-creds").Obj()
		if err := env.Client.Create(ctx, policy); err != nil {
			t.Fatal(err)
		}
		job := rt.MakeJob("with-policy", ns).Annotation(v1.AnnotationPolicy, "team").Obj()
		if err := env.Client.Create(ctx, job); err != nil {
			t.Fatalf("create: %v", err)
		}
		if job.Spec.Template.Annotations[v1.AnnotationRendered] == "" {
			t.Error("the Job returned by create is not rendered")
		}
		missing := rt.MakeJob("missing-policy", ns).Annotation(v1.AnnotationPolicy, "nope").Obj()
		wantDenied(t, env.Client.Create(ctx, missing), `annotation kdefer.io/policy: DeferPolicy "nope" does not exist in namespace "jobs"; fix: create it first`)
	})

	denials := []struct {
		name string
		job  *batchv1.Job
		want []string
	}{
		{name: "malformed annotations, all at once", job: rt.MakeJob("bad", ns).StageOut("s3://results/{pod}/").
			Annotation(v1.AnnotationDeadline, "soon").Annotation(v1.AnnotationTriggers, "Succeeded,Exploded").Obj(),
			want: []string{`admission webhook "render.jobs.kdefer.io" denied the request`,
				`annotation kdefer.io/deadline: "soon" is not a positive duration; fix: use a Go duration such as 30m or 2h`,
				`annotation kdefer.io/triggers: "Exploded" is not a trigger; fix: use "all" or a comma-separated list of`}},
		{name: "no stage-out", job: rt.MakeJob("nothing", ns).Obj(),
			want: []string{"annotation kdefer.io/stage-out: is not set and no DeferPolicy is named", "fix: set kdefer.io/stage-out"}},
		{name: "hostPath work volume", job: rt.MakeJob("hostpath", ns).StageOut("s3://r/{pod}/").Annotation(v1.AnnotationWorkVolume, "data").
			Volume(corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}}).Obj(),
			want: []string{`volume "data" (kdefer.io/work-volume): is a hostPath volume`}},
		{name: "credentials in main container", job: rt.MakeJob("leak", ns).StageOut("s3://r/{pod}/").Annotation(v1.AnnotationCredentials, "minio").EnvFromSecret(0, "minio").Obj(),
			want: []string{`receives the credentials Secret "minio"`}},
	}
	for _, tc := range denials {
		t.Run(tc.name, func(t *testing.T) { wantDenied(t, env.Client.Create(ctx, tc.job), tc.want...) })
	}

	t.Run("unlabelled Jobs are not touched", func(t *testing.T) {
		job := rt.MakeJob("plain", ns).NoLabel(v1.LabelEnabled).Obj()
		if err := env.Client.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		if job.Spec.Template.Labels[v1.LabelManaged] != "" || len(job.Spec.Template.Finalizers) != 0 {
			t.Errorf("unlabelled Job was rendered: %+v", job.Spec.Template.ObjectMeta)
		}
	})

	t.Run("DeferPolicy validation", func(t *testing.T) {
		bad := rt.MakePolicy("bad", ns, "s3://b/{pod}/").
			TriggerRule(v1.TriggerRule{Triggers: []v1.Trigger{v1.TriggerFailed}, DeferContainers: []string{"notify"}}).Obj()
		wantDenied(t, env.Client.Create(ctx, bad), `admission webhook "validate.deferpolicies.kdefer.io" denied the request`,
			`spec.triggerRules[0].deferContainers[0]: Invalid value: "notify": names no entry of spec.deferContainers`)
		reserved := rt.MakePolicy("reserved", ns, "s3://b/{pod}/").DeferContainer(corev1.Container{Name: "stage-out", Image: "x"}).Obj()
		wantDenied(t, env.Client.Create(ctx, reserved), `spec.deferContainers[0].name: Invalid value: "stage-out"`)
	})
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

const kdeferSA = "system:serviceaccount:kdefer-system:kdefer-controller"

func testRetainPolicy(t *testing.T, env *envtest.Env) {
	ctx := context.Background()
	env.InstallRetainPolicy(t)
	ns := namespace(t, env, "retain")
	// Everyone here may delete PVCs as far as RBAC goes; only the policy stands in the way.
	gc := env.Impersonate(t, "system:serviceaccount:kube-system:generic-garbage-collector", "system:masters")
	alice := env.Impersonate(t, "alice", "system:masters")
	kdefer := env.Impersonate(t, kdeferSA, "system:masters")

	pvc := func(name string, labelled bool, owners ...metav1.OwnerReference) *corev1.PersistentVolumeClaim {
		p := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
		if labelled {
			p.Labels = map[string]string{v1.LabelWorkVolume: "kdefer-work"}
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	podOwner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "sim-abc", UID: "pod-uid", Controller: ptr(true), BlockOwnerDeletion: ptr(true)}
	runOwner := metav1.OwnerReference{APIVersion: v1.GroupVersion.String(), Kind: "DeferRun", Name: "sim-abc", UID: "run-uid"}

	cases := []struct {
		name    string
		labeled bool
		owners  []metav1.OwnerReference
		as      client.Client
		allowed bool
	}{
		{name: "garbage collector, pod-owned only", labeled: true, owners: []metav1.OwnerReference{podOwner}, as: gc},
		{name: "user, pod-owned only", labeled: true, owners: []metav1.OwnerReference{podOwner}, as: alice},
		{name: "user, no owner", labeled: true, as: alice},
		// Retained means retained: once a DeferRun co-owns the volume, it
		// goes only when kdefer releases it (kdefer deletes it itself), so
		// neither a user nor the garbage collector may delete it, whether
		// the run is unfinished or kept the volume after a failure.
		{name: "user, co-owned by a DeferRun", labeled: true, owners: []metav1.OwnerReference{podOwner, runOwner}, as: alice},
		{name: "garbage collector, co-owned by a DeferRun", labeled: true, owners: []metav1.OwnerReference{podOwner, runOwner}, as: gc},
		{name: "user, DeferRun owner only (retained, pod gone)", labeled: true, owners: []metav1.OwnerReference{runOwner}, as: alice},
		{name: "kdefer's ServiceAccount", labeled: true, owners: []metav1.OwnerReference{podOwner}, as: kdefer, allowed: true},
		{name: "kdefer's ServiceAccount releases a retained volume", labeled: true, owners: []metav1.OwnerReference{runOwner}, as: kdefer, allowed: true},
		{name: "not a work volume", owners: []metav1.OwnerReference{podOwner}, as: gc, allowed: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := pvc(fmt.Sprintf("pvc-%d", i), tc.labeled, tc.owners...)
			// Deleted as kdefer's release deletes (foreground, this PVC only); the policy looks only at who asks.
			err := tc.as.Delete(ctx, p, client.Preconditions{UID: &p.UID}, client.PropagationPolicy(metav1.DeletePropagationForeground))
			if tc.allowed {
				if err != nil {
					t.Fatalf("delete refused: %v", err)
				}
				return
			}
			why := "a kdefer-managed pod and kdefer has not taken it over yet"
			release := "kdefer release (once"
			switch {
			case slices.Contains(tc.owners, runOwner):
				why = "kdefer-managed pod sim-abc, kept by DeferRun sim-abc until kdefer releases it (the run is unfinished, or retained the volume)"
				release = "kdefer release -n " + ns + " deferrun/sim-abc (once"
			case len(tc.owners) > 0:
				why = "kdefer-managed pod sim-abc and kdefer has not taken it over yet"
				release = "kdefer release -n " + ns + " deferrun/sim-abc (once"
			}
			wantDenied(t, err, "ValidatingAdmissionPolicy 'kdefer-retain-work-volumes'",
				fmt.Sprintf("PersistentVolumeClaim %s/%s holds the work volume of %s", ns, p.Name, why),
				release, fmt.Sprintf("kubectl label pvc -n %s %s kdefer.io/work-volume- and delete it again", ns, p.Name))
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("status reason %v, want Forbidden", apierrors.ReasonForError(err))
			}
		})
	}

	t.Run("label removed, then deleted on purpose", func(t *testing.T) {
		p := pvc("on-purpose", true, podOwner)
		delete(p.Labels, v1.LabelWorkVolume)
		if err := alice.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := alice.Delete(ctx, p); err != nil {
			t.Fatalf("delete after unlabelling: %v", err)
		}
	})

	t.Run("namespace being deleted", func(t *testing.T) {
		dns := namespace(t, env, "retain-doomed")
		p := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: dns, Labels: map[string]string{v1.LabelWorkVolume: "w"}, OwnerReferences: []metav1.OwnerReference{podOwner, runOwner}},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		wantDenied(t, gc.Delete(ctx, p, client.DryRunAll), "holds the work volume")
		// envtest runs no namespace controller: the namespace stays Terminating.
		if err := env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dns}}); err != nil {
			t.Fatal(err)
		}
		nsc := env.Impersonate(t, "system:serviceaccount:kube-system:namespace-controller", "system:masters")
		if err := nsc.Delete(ctx, p); err != nil {
			t.Fatalf("delete in a terminating namespace: %v", err)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func testKustomize(t *testing.T, env *envtest.Env) {
	objs := envtest.DecodeObjects(t, envtest.Kustomize(t, "deploy"))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	want := map[string]int{
		"Namespace": 1, "CustomResourceDefinition": 2, "ServiceAccount": 1, "ClusterRole": 5, "ClusterRoleBinding": 2,
		"Role": 2, "RoleBinding": 2, "Deployment": 1, "PodDisruptionBudget": 1, "Service": 2, "MutatingWebhookConfiguration": 1,
		"ValidatingWebhookConfiguration": 1, "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1,
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("kinds in kubectl kustomize deploy/ (-want +got):\n%s", diff)
	}
	// Everything is accepted by a real apiserver (replacing envtest's
	// webhook configurations, which point at the in-process server).
	ctx := context.Background()
	_ = env.Client.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kdefer"}})
	_ = env.Client.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kdefer"}})
	envtest.Apply(t, env.Client, objs...)

	dep := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-controller"}, dep); err != nil {
		t.Fatal(err)
	}
	ps := dep.Spec.Template.Spec
	c := ps.Containers[0]
	sc := c.SecurityContext
	if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot ||
		sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("manager is not non-root with a read-only root FS and no capabilities: %+v %+v", ps.SecurityContext, sc)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("manager has no probes")
	}
	// Draining the node of a replica must not pause runs: two replicas
	// electing a leader, spread over nodes when they can be, and a budget
	// that lets a drain take one at a time.
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 || !slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("manager: %v replicas, args %v: want 2 or more, electing a leader", dep.Spec.Replicas, c.Args)
	}
	if a := ps.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != corev1.LabelHostname ||
		!cmp.Equal(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels, dep.Spec.Template.Labels) {
		t.Errorf("manager replicas are not spread over nodes: affinity %+v", a)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-controller"}, pdb); err != nil {
		t.Fatalf("manager budget: %v", err)
	}
	if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 || !cmp.Equal(pdb.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels) {
		t.Errorf("manager budget: maxUnavailable %v selector %+v: want 1, the Deployment's pods", mu, pdb.Spec.Selector)
	}
	if ps.ServiceAccountName != "kdefer-controller" || !strings.HasSuffix(kdeferSA, ":"+ps.ServiceAccountName) {
		t.Errorf("service account %q does not match the admission policy's %q", ps.ServiceAccountName, kdeferSA)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "kdefer"}, mwc); err != nil {
		t.Fatal(err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "kdefer"}, vwc); err != nil {
		t.Fatal(err)
	}
	type hook struct {
		name     string
		fp       *admissionregistrationv1.FailurePolicyType
		se       *admissionregistrationv1.SideEffectClass
		timeout  *int32
		selector *metav1.LabelSelector
		svc      *admissionregistrationv1.ServiceReference
	}
	var hooks []hook
	for _, w := range mwc.Webhooks {
		hooks = append(hooks, hook{w.Name, w.FailurePolicy, w.SideEffects, w.TimeoutSeconds, w.ObjectSelector, w.ClientConfig.Service})
	}
	for _, w := range vwc.Webhooks {
		hooks = append(hooks, hook{w.Name, w.FailurePolicy, w.SideEffects, w.TimeoutSeconds, w.ObjectSelector, w.ClientConfig.Service})
	}
	paths := map[string]bool{kwebhook.MutateJobPath: true, kwebhook.ValidateJobPath: true, kwebhook.ValidatePolicyPath: true,
		kwebhook.ValidateEvictionPath: true, kwebhook.ArmPVCPath: true, kwebhook.MutatePodPath: true, kwebhook.ValidateCronJobPath: true}
	for _, h := range hooks {
		// Job and policy webhooks fail closed (nothing unrendered gets in);
		// the eviction guard and the arming fail open (kdefer down must
		// not block drains, nor pods' volumes: the controller arms later).
		wantFP, wantSE := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
		switch h.name {
		case "evictions.pods.kdefer.io":
			wantFP = admissionregistrationv1.Ignore
		case "validate.cronjobs.kdefer.io":
			// It only tells earlier what the Job webhook enforces.
			wantFP = admissionregistrationv1.Ignore
		case "arm.persistentvolumeclaims.kdefer.io":
			// It creates the pod's DeferRun, except on a dry run.
			wantFP, wantSE = admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNoneOnDryRun
			if len(h.selector.MatchExpressions) != 1 || h.selector.MatchExpressions[0].Key != v1.LabelWorkVolume {
				t.Errorf("webhook %s does not select on %s: %+v", h.name, v1.LabelWorkVolume, h.selector)
			}
		}
		if *h.fp != wantFP || *h.se != wantSE || *h.timeout > 10 {
			t.Errorf("webhook %s: failurePolicy %s sideEffects %s timeout %d", h.name, *h.fp, *h.se, *h.timeout)
		}
		if (strings.HasSuffix(h.name, ".jobs.kdefer.io") || h.name == "render.pods.kdefer.io") && h.selector.MatchLabels[v1.LabelEnabled] != "true" {
			t.Errorf("webhook %s does not select on %s", h.name, v1.LabelEnabled)
		}
		if h.svc == nil || h.svc.Name != "kdefer-webhook" || h.svc.Namespace != "kdefer-system" || !paths[*h.svc.Path] {
			t.Errorf("webhook %s: client config %+v", h.name, h.svc)
		}
	}
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-webhook"}, svc); err != nil {
		t.Fatalf("webhook Service: %v", err)
	}

	t.Run("self-managed certificates", func(t *testing.T) {
		r := certs.New(env.Client, certs.Options{CertDir: t.TempDir()}, logr.Discard())
		if err := r.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		sec := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-webhook-cert"}, sec); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "kdefer"}, mwc); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "kdefer"}, vwc); err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]byte{mwc.Webhooks[0].ClientConfig.CABundle, vwc.Webhooks[0].ClientConfig.CABundle, vwc.Webhooks[1].ClientConfig.CABundle} {
			if len(b) == 0 || string(b) != string(sec.Data[certs.CACertKey]) {
				t.Error("a webhook's caBundle is not the generated CA")
			}
		}
	})

	t.Run("overlays", func(t *testing.T) {
		local := envtest.DecodeObjects(t, envtest.Kustomize(t, "deploy/overlays/local"))
		for _, o := range local {
			if o.GetKind() == "ValidatingWebhookConfiguration" || o.GetKind() == "MutatingWebhookConfiguration" {
				hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
				for _, h := range hooks {
					url, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "url")
					if !strings.HasPrefix(url, "https://127.0.0.1:9443/") {
						t.Errorf("local overlay: webhook url %q", url)
					}
				}
			}
		}
		for _, o := range local {
			if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("kdefer-test"), client.ForceOwnership, client.DryRunAll); err != nil {
				t.Errorf("local overlay: %s %s rejected: %v", o.GetKind(), o.GetName(), err)
			}
		}
		cm := envtest.DecodeObjects(t, envtest.Kustomize(t, "deploy/overlays/cert-manager"))
		found := false
		for _, o := range cm {
			found = found || (o.GetKind() == "Certificate" && o.GetName() == "kdefer-webhook-cert")
		}
		if !found {
			t.Error("cert-manager overlay has no Certificate")
		}
	})
}
