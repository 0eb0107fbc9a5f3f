package webhook

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	rt "github.com/kdefer/kdefer/render/testing"
)

// cronJobOf wraps a Job as a CronJob's jobTemplate, as a user writes it.
func cronJobOf(job *batchv1.Job) *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns"},
		Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: job.Labels, Annotations: job.Annotations}, Spec: job.Spec}},
	}
}

// TestValidateCronJob: a CronJob whose jobTemplate opts in is refused when
// kdefer would refuse its Jobs, naming the problem and the fix as for a Job,
// so its author hears of it at once rather than as a FailedCreate event per
// schedule. A template that does not opt in, an update that leaves the
// template alone and a policy not created yet pass.
func TestValidateCronJob(t *testing.T) {
	policy := rt.MakePolicy("team", "ns", "s3://team/{job}/{pod}/").Obj()
	policy.Spec.Locked = []v1.LockedField{v1.LockedStageOut}
	good := cronJobOf(rt.MakeJob("x", "ns").StageOut("s3://b/{job}/{pod}/").Obj())
	bad := cronJobOf(rt.MakeJob("x", "ns").StageOut("s3://b/{job}/{pod}/").Annotation(v1.AnnotationDeadline, "soon").Obj())
	suspended := bad.DeepCopy()
	suspended.Spec.Suspend = ptr.To(true)
	for _, tc := range []struct {
		name        string
		op          admissionv1.Operation
		cj, old     *batchv1.CronJob
		wantDeny    []string
		wantWarning string
	}{
		{name: "valid template", op: admissionv1.Create, cj: good},
		{name: "invalid template", op: admissionv1.Create, cj: bad,
			wantDeny: []string{"kdefer would refuse every Job of this CronJob", "annotation kdefer.io/deadline", "soon"}},
		{name: "template overrides a locked field", op: admissionv1.Create,
			cj:       cronJobOf(rt.MakeJob("x", "ns").Annotation(v1.AnnotationPolicy, "team").StageOut("s3://elsewhere/{pod}/").Obj()),
			wantDeny: []string{v1.AnnotationStageOut, "which the policy locks (spec.locked)"}},
		{name: "template changed to an invalid one", op: admissionv1.Update, cj: bad, old: good,
			wantDeny: []string{"annotation kdefer.io/deadline"}},
		{name: "update leaving the template alone", op: admissionv1.Update, cj: suspended, old: bad},
		{name: "template not opted in", op: admissionv1.Create, cj: cronJobOf(rt.MakeJob("x", "ns").NoLabel(v1.LabelEnabled).
			Annotation(v1.AnnotationDeadline, "soon").Obj())},
		{name: "policy not created yet", op: admissionv1.Create, cj: cronJobOf(rt.MakeJob("x", "ns").Annotation(v1.AnnotationPolicy, "later").Obj()),
			wantWarning: `DeferPolicy "later" does not exist in namespace "ns"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var old any
			if tc.old != nil {
				old = tc.old
			}
			resp := handlers(t, policy).ValidateCronJob(context.Background(), request(t, tc.op, tc.cj, old))
			if tc.wantDeny != nil {
				if resp.Allowed {
					t.Fatalf("allowed, want a denial naming %q", tc.wantDeny)
				}
				for _, w := range tc.wantDeny {
					if !strings.Contains(resp.Result.Message, w) {
						t.Errorf("denial %q does not name %q", resp.Result.Message, w)
					}
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %s", resp.Result.Message)
			}
			if tc.wantWarning != "" && !strings.Contains(strings.Join(resp.Warnings, "\n"), tc.wantWarning) {
				t.Errorf("warnings %q, want one naming %q", resp.Warnings, tc.wantWarning)
			}
		})
	}
}
