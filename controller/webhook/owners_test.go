package webhook

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	rt "github.com/kdefer/kdefer/render/testing"
)

// TestMutateJobOfOtherOwners: the Jobs a CronJob and a JobSet create carry
// the labels and annotations of their templates (the CronJob's
// jobTemplate.metadata, the JobSet's replicatedJobs[].template.metadata), so
// an opted-in template reaches the Job webhook as an opted-in Job with its
// owner's labels and owner reference, and is rendered like any Job. Neither
// owner's template is rendered itself: it is not a pod template the pods
// are made from, the Job's is.
func TestMutateJobOfOtherOwners(t *testing.T) {
	cron := rt.MakeJob("nightly-29433600", "ns").StageOut("s3://b/{job}/{pod}/").
		Annotation("batch.kubernetes.io/cronjob-scheduled-timestamp", "2026-12-01T00:00:00Z").Obj()
	cron.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: "nightly", UID: "cj", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}

	// As JobSet v0.8 makes the Job of replicatedJob "workers", index 0.
	js := rt.MakeJob("train-workers-0", "ns").Indexed(4, 4).StageOut("s3://b/{job}/{index}/").
		Label("jobset.sigs.k8s.io/jobset-name", "train").Label("jobset.sigs.k8s.io/replicatedjob-name", "workers").
		Label("jobset.sigs.k8s.io/job-index", "0").
		TemplateLabel("jobset.sigs.k8s.io/jobset-name", "train").TemplateAnnotation("jobset.sigs.k8s.io/job-key", "abc").Obj()
	js.OwnerReferences = []metav1.OwnerReference{{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "train", UID: "js", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}

	for name, job := range map[string]*batchv1.Job{"CronJob": cron, "JobSet": js} {
		t.Run(name, func(t *testing.T) {
			h := handlers(t)
			req := request(t, admissionv1.Create, job, nil)
			resp := h.MutateJob(context.Background(), req)
			if !resp.Allowed || len(resp.Patches) == 0 {
				t.Fatalf("not rendered: allowed=%v %q", resp.Allowed, resp.Result.Message)
			}
			got := applyPatch[batchv1.Job](t, req, resp)
			if got.Spec.Template.Labels[v1.LabelManaged] != "true" || got.Spec.Template.Annotations[v1.AnnotationRendered] == "" {
				t.Errorf("template not rendered: %+v", got.Spec.Template.ObjectMeta)
			}
			if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].Kind != name {
				t.Errorf("owner changed: %+v", got.OwnerReferences)
			}
			if v := h.ValidateJob(context.Background(), request(t, admissionv1.Create, got, nil)); !v.Allowed {
				t.Errorf("ValidateJob denied the rendered Job: %s", v.Result.Message)
			}
		})
	}
}
