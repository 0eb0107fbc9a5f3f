package webhook

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	rt "github.com/kdefer/kdefer/render/testing"
)

func barePod(ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ci-", Labels: map[string]string{v1.LabelEnabled: "true"}, Annotations: ann},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "test", Image: "busybox"}}},
	}
}

func TestMutatePod(t *testing.T) {
	policy := rt.MakePolicy("team", "ns", "s3://team/{pod}/").Obj()
	locked := rt.MakePolicy("locked", "ns", "s3://team/{pod}/").Credentials("team-creds").Obj()
	locked.Spec.Locked = []v1.LockedField{v1.LockedStageOut, v1.LockedCredentials}
	renderedJobPod := barePod(map[string]string{v1.AnnotationStageOut: "s3://b/{pod}/", v1.AnnotationRendered: "v0"})
	tekton := barePod(map[string]string{v1.AnnotationPolicy: "team"})
	tekton.OwnerReferences = []metav1.OwnerReference{{APIVersion: "tekton.dev/v1", Kind: "TaskRun", Name: "tr", UID: "u", Controller: ptr.To(true)}}
	for _, tc := range []struct {
		name      string
		op        admissionv1.Operation
		pod       *corev1.Pod
		wantDeny  string
		untouched bool
	}{
		{name: "bare pod", op: admissionv1.Create, pod: barePod(map[string]string{v1.AnnotationStageOut: "s3://b/{pod}/"})},
		{name: "unknown owner, with policy", op: admissionv1.Create, pod: tekton},
		{name: "not opted in", op: admissionv1.Create, pod: func() *corev1.Pod {
			p := barePod(map[string]string{v1.AnnotationStageOut: "s3://b/{pod}/"})
			p.Labels = nil
			return p
		}(), untouched: true},
		{name: "already rendered from a Job's template", op: admissionv1.Create, pod: renderedJobPod, untouched: true},
		{name: "update", op: admissionv1.Update, pod: barePod(map[string]string{v1.AnnotationStageOut: "s3://b/{pod}/"}), untouched: true},
		{name: "missing policy", op: admissionv1.Create, pod: barePod(map[string]string{v1.AnnotationPolicy: "nope"}),
			wantDeny: `annotation kdefer.io/policy: DeferPolicy "nope" does not exist in namespace "ns"`},
		// A pod is held to its policy as a Job is: what the policy locks,
		// the pod's annotations cannot change.
		{name: "overrides what its policy locks", op: admissionv1.Create, pod: barePod(map[string]string{v1.AnnotationPolicy: "locked",
			v1.AnnotationStageOut: "s3://mine/{pod}/", v1.AnnotationCredentials: "mine"}),
			wantDeny: "annotation kdefer.io/stage-out: overrides the DeferPolicy's stageOut, which the policy locks (spec.locked)"},
		{name: "bad configuration", op: admissionv1.Create, pod: barePod(map[string]string{v1.AnnotationStageOut: "s3://b/{job}/"}),
			wantDeny: "kdefer cannot manage this pod:\n- annotation kdefer.io/stage-out: uses {job}, but the pod belongs to no Job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := handlers(t, policy, locked)
			req := request(t, tc.op, tc.pod, tc.pod)
			resp := h.MutatePod(context.Background(), req)
			if tc.wantDeny != "" {
				if resp.Allowed || !strings.Contains(resp.Result.Message, tc.wantDeny) {
					t.Fatalf("allowed=%v message=%q, want denial containing %q", resp.Allowed, resp.Result.Message, tc.wantDeny)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %s", resp.Result.Message)
			}
			if tc.untouched {
				if len(resp.Patches) != 0 {
					t.Fatalf("patched: %+v", resp.Patches)
				}
				return
			}
			got := applyPatch[corev1.Pod](t, req, resp)
			var pol *v1.DeferPolicySpec
			if tc.pod.Annotations[v1.AnnotationPolicy] != "" {
				pol = &policy.Spec
			}
			want, err := render.Pod(tc.pod, pol, opts.Render)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("patched pod differs from render.Pod (-want +got):\n%s", diff)
			}
		})
	}
}
