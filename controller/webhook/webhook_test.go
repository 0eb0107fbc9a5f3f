package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/resolve"
)

var opts = Options{Render: render.Options{StageImage: "img:test"}}

func handlers(t *testing.T, objs ...*v1.DeferPolicy) *Handlers {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s).WithIndex(&v1.DeferPolicy{}, resolve.IndexNamespaceDefault, resolve.NamespaceDefaultIndex)
	for _, o := range objs {
		b = b.WithObjects(o)
	}
	return NewHandlers(opts, b.Build())
}

func request(t *testing.T, op admissionv1.Operation, obj, old any) admission.Request {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op, Namespace: "ns", Object: runtime.RawExtension{Raw: raw}}}
	if old != nil {
		req.OldObject.Raw, _ = json.Marshal(old)
	}
	return req
}

// applyPatch applies the webhook's JSON patch to the request's object and
// decodes the result as a T (a Job or a Pod).
func applyPatch[T any](t *testing.T, req admission.Request, resp admission.Response) *T {
	t.Helper()
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(req.Object.Raw)
	if err != nil {
		t.Fatal(err)
	}
	obj := new(T)
	if err := json.Unmarshal(out, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func TestMutateJob(t *testing.T) {
	policy := rt.MakePolicy("team", "ns", "s3://team/{pod}/").Credentials("creds").Obj()
	cases := []struct {
		name     string
		job      *batchv1.Job
		wantDeny string
	}{
		{name: "annotations only", job: rt.MakeJob("j", "ns").StageOut("s3://b/{pod}/").Obj()},
		{name: "with policy", job: rt.MakeJob("j", "ns").Annotation(v1.AnnotationPolicy, "team").Obj()},
		{name: "missing policy", job: rt.MakeJob("j", "ns").Annotation(v1.AnnotationPolicy, "nope").Obj(),
			wantDeny: `annotation kdefer.io/policy: DeferPolicy "nope" does not exist in namespace "ns"; fix: create it first`},
		{name: "bad annotation", job: rt.MakeJob("j", "ns").StageOut("s3://b/{pod}/").Annotation(v1.AnnotationDeadline, "soon").Obj(),
			wantDeny: "kdefer cannot manage this Job:\n- annotation kdefer.io/deadline: \"soon\" is not a positive duration; fix: use a Go duration such as 30m or 2h"},
		// The policy has no stage-in: render would have kept the user's
		// container as its own, with the credentials it asks for.
		{name: "init container named like kdefer's stage-in", job: rt.MakeJob("j", "ns").Annotation(v1.AnnotationPolicy, "team").
			InitContainer(corev1.Container{Name: "kdefer-stage-in", Image: "evil", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}}).Obj(),
			wantDeny: `spec.template.spec.initContainers[0].name: "kdefer-stage-in" is reserved for kdefer`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := handlers(t, policy)
			req := request(t, admissionv1.Create, tc.job, nil)
			resp := h.MutateJob(context.Background(), req)
			if tc.wantDeny != "" {
				if resp.Allowed || !strings.Contains(resp.Result.Message, tc.wantDeny) {
					t.Fatalf("allowed=%v result=%+v, want denial containing %q", resp.Allowed, resp.Result, tc.wantDeny)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %s", resp.Result.Message)
			}
			got := applyPatch[batchv1.Job](t, req, resp)
			var pol *v1.DeferPolicySpec
			if tc.job.Annotations[v1.AnnotationPolicy] != "" {
				pol = &policy.Spec
			}
			want, err := render.Job(tc.job, pol, opts.Render)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("patched Job differs from render.Job (-want +got):\n%s", diff)
			}
			// The validating webhook admits what the mutating one produced.
			if v := h.ValidateJob(context.Background(), request(t, admissionv1.Create, got, nil)); !v.Allowed {
				t.Errorf("ValidateJob denied the rendered Job: %s", v.Result.Message)
			}
		})
	}
}

func TestValidateJob(t *testing.T) {
	h := handlers(t)
	raw := rt.MakeJob("j", "ns").StageOut("s3://b/{pod}/").Obj()
	rendered, err := render.Job(raw, nil, opts.Render)
	if err != nil {
		t.Fatal(err)
	}
	resp := h.ValidateJob(context.Background(), request(t, admissionv1.Create, raw, nil))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "is not rendered by kdefer") || !strings.Contains(resp.Result.Message, "fix:") {
		t.Errorf("unrendered Job: allowed=%v %q", resp.Allowed, resp.Result.Message)
	}
	// Annotation-only update of a running Job (e.g. kdefer skip) passes.
	skipped := rendered.DeepCopy()
	skipped.Annotations[v1.AnnotationSkip] = "true"
	if resp := h.ValidateJob(context.Background(), request(t, admissionv1.Update, skipped, rendered)); !resp.Allowed {
		t.Errorf("annotation update denied: %s", resp.Result.Message)
	}
	if resp := h.MutateJob(context.Background(), request(t, admissionv1.Update, skipped, rendered)); !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("annotation update mutated: %+v", resp)
	}
	// Opting in an existing Job cannot render it: a warning says so.
	plain := rt.MakeJob("j", "ns").NoLabel(v1.LabelEnabled).Obj()
	labelled := plain.DeepCopy()
	labelled.Labels = map[string]string{v1.LabelEnabled: "true"}
	if resp := h.MutateJob(context.Background(), request(t, admissionv1.Update, labelled, plain)); !resp.Allowed || len(resp.Patches) != 0 ||
		len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "recreate the Job") {
		t.Errorf("label added to an existing Job: %+v", resp)
	}
	// Jobs without the label are not kdefer's.
	other := rt.MakeJob("j", "ns").NoLabel(v1.LabelEnabled).Obj()
	if resp := h.ValidateJob(context.Background(), request(t, admissionv1.Create, other, nil)); !resp.Allowed {
		t.Errorf("unlabelled Job denied: %s", resp.Result.Message)
	}
}

func TestValidatePolicy(t *testing.T) {
	h := handlers(t)
	good := rt.MakePolicy("p", "ns", "s3://b/{pod}/").Obj()
	if resp := h.ValidatePolicy(context.Background(), request(t, admissionv1.Create, good, nil)); !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("good policy: %+v", resp)
	}
	shared := rt.MakePolicy("p", "ns", "s3://b/shared/").Obj()
	if resp := h.ValidatePolicy(context.Background(), request(t, admissionv1.Create, shared, nil)); !resp.Allowed || len(resp.Warnings) != 1 {
		t.Errorf("shared prefix: want one warning: %+v", resp)
	}
	// {index} alone: every retry of an index stages out to its prefix.
	perIndex := rt.MakePolicy("p", "ns", "s3://b/{job}/{index}/").Obj()
	if resp := h.ValidatePolicy(context.Background(), request(t, admissionv1.Create, perIndex, nil)); !resp.Allowed || len(resp.Warnings) != 1 {
		t.Errorf("prefix per index: want one warning: %+v", resp)
	}
	// Overwriting on purpose is said once, in the policy: no warning.
	perIndex.Spec.StageOut.Overwrite = true
	if resp := h.ValidatePolicy(context.Background(), request(t, admissionv1.Create, perIndex, nil)); !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("prefix per index, overwrite: want no warning: %+v", resp)
	}
	for _, tc := range []struct {
		name string
		p    *v1.DeferPolicy
		want string
	}{
		{name: "privileged defer container", p: rt.MakePolicy("p", "ns", "s3://b/{pod}/").DeferContainer(corev1.Container{Name: "d", Image: "x",
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}}).Obj(),
			want: "spec.deferContainers[0].securityContext.runAsUser: Forbidden: defer containers never run as root: defer pods meet the Pod Security Standard restricted; fix: remove runAsUser"},
		{name: "defer container mounts the logs token", p: rt.MakePolicy("p", "ns", "s3://b/{pod}/").DeferContainer(corev1.Container{Name: "d", Image: "x",
			VolumeMounts: []corev1.VolumeMount{{Name: v1.DefaultWorkVolumeName, MountPath: "/w"}, {Name: "kdefer-logs-token", MountPath: "/t"}}}).Obj(),
			want: `spec.deferContainers[0].volumeMounts[1].name: Forbidden: "kdefer-logs-token" is reserved for kdefer`},
		{name: "defer container mounts the stage step's /tmp", p: rt.MakePolicy("p", "ns", "s3://b/{pod}/").DeferContainer(corev1.Container{Name: "d", Image: "x",
			VolumeMounts: []corev1.VolumeMount{{Name: "kdefer-tmp", MountPath: "/scratch"}}}).Obj(),
			want: `spec.deferContainers[0].volumeMounts[0].name: Forbidden: "kdefer-tmp" is reserved for kdefer`},
		{name: "mem://", p: rt.MakePolicy("p", "ns", "mem://b/{pod}/").Obj(), want: `spec.stageOut.url: Invalid value: "mem://b/{pod}/"`},
		{name: "file:// by default", p: rt.MakePolicy("p", "ns", "file:///data/{pod}/").Obj(), want: "spec.stageOut.url: Forbidden: file:// URLs"},
	} {
		resp := h.ValidatePolicy(context.Background(), request(t, admissionv1.Create, tc.p, nil))
		if resp.Allowed || !strings.Contains(resp.Result.Message, tc.want) {
			t.Errorf("%s: allowed=%v %q, want a denial with %q", tc.name, resp.Allowed, resp.Result.Message, tc.want)
		}
	}
	allowFile := opts
	allowFile.Render.AllowFileURLs = true
	if resp := NewHandlers(allowFile, nil).ValidatePolicy(context.Background(), request(t, admissionv1.Create, rt.MakePolicy("p", "ns", "file:///data/{pod}/").Obj(), nil)); !resp.Allowed {
		t.Errorf("file:// with --allow-file-urls: %q", resp.Result.Message)
	}
	bad := rt.MakePolicy("p", "ns", "s3://b/{pod}/").TriggerRule(v1.TriggerRule{Triggers: []v1.Trigger{v1.TriggerFailed}, DeferContainers: []string{"notify"}}).Obj()
	resp := h.ValidatePolicy(context.Background(), request(t, admissionv1.Create, bad, nil))
	if resp.Allowed || !strings.Contains(resp.Result.Message, `spec.triggerRules[0].deferContainers[0]: Invalid value: "notify": names no entry of spec.deferContainers`) {
		t.Errorf("bad policy: allowed=%v %q", resp.Allowed, resp.Result.Message)
	}
}

// A namespace's locked default binds a Job created moments after it, before
// kdefer's cache has seen it (seen in the e2e tier under load): the webhook
// reads the defaults from the API, not the cache.
func TestLockedDefaultBeforeTheCacheSeesIt(t *testing.T) {
	team := rt.MakePolicy("team", "ns", "s3://team/{pod}/").Credentials("creds").Obj()
	def := rt.MakePolicy("platform", "ns", "s3://platform/{pod}/").Credentials("platform-creds").
		NamespaceDefault().Locked(v1.LockedStageOut, v1.LockedCredentials).Obj()
	api := handlers(t, team, def)
	lagging := handlers(t, team)
	h := NewHandlers(Options{Render: opts.Render, Reader: api.reader, Cache: lagging.cache}, nil)
	job := rt.MakeJob("j", "ns").Annotation(v1.AnnotationPolicy, "team").Obj()
	resp := h.MutateJob(context.Background(), request(t, admissionv1.Create, job, nil))
	want := `names DeferPolicy "team", but DeferPolicy "platform" is the default of namespace ns`
	if resp.Allowed || !strings.Contains(resp.Result.Message, want) {
		t.Fatalf("a Job naming another policy than the locked default: allowed, want denied: %s", want)
	}
}
