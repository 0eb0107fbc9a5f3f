package envtest_test

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/test/envtest"
)

// testCronJobs: on a real apiserver with deploy/webhook's configuration, a
// CronJob whose jobTemplate opts in reaches kdefer (the matchConditions
// look into the template, which objectSelector cannot) and is refused when
// kdefer would refuse its Jobs, naming the problem; a valid one is created,
// and one whose template does not opt in never reaches kdefer.
func testCronJobs(t *testing.T, env *envtest.Env) {
	ctx := context.Background()
	ns := namespace(t, env, "cron")
	cronJob := func(name string, job *batchv1.Job) *batchv1.CronJob {
		return &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: job.Labels, Annotations: job.Annotations}, Spec: job.Spec}},
		}
	}
	bad := rt.MakeJob("x", ns).StageOut("s3://results/{job}/{index}/").Obj()
	wantDenied(t, env.Client.Create(ctx, cronJob("bad", bad)), `admission webhook "validate.cronjobs.kdefer.io" denied the request`,
		"kdefer would refuse every Job of this CronJob", "uses {index}, but the Job is not Indexed")

	good := cronJob("nightly", rt.MakeJob("x", ns).StageOut("s3://results/{job}/{pod}/").Obj())
	if err := env.Client.Create(ctx, good); err != nil {
		t.Errorf("a CronJob with a valid template: %v", err)
	}
	// The template is left as written: its Jobs are rendered as they are made.
	if good.Spec.JobTemplate.Spec.Template.Annotations[v1.AnnotationRendered] != "" {
		t.Errorf("the CronJob's template was rendered: %v", good.Spec.JobTemplate.Spec.Template.Annotations)
	}
	notOptedIn := bad.DeepCopy()
	delete(notOptedIn.Labels, v1.LabelEnabled)
	if err := env.Client.Create(ctx, cronJob("plain", notOptedIn)); err != nil {
		t.Errorf("a CronJob whose template does not opt in: %v", err)
	}
}
