package webhook

import (
	"context"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/webhook/review"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/resolve"
)

// ValidateCronJobPath serves the CronJob validating webhook.
const ValidateCronJobPath = "/validate-batch-v1-cronjob"

// ValidateCronJob refuses a CronJob whose jobTemplate opts in but would be
// refused as a Job. The Job webhook renders and checks every Job the CronJob
// controller makes from the template; without this, a mistake in the
// template would surface only as the CronJob's FailedCreate events, once
// per schedule, instead of to whoever wrote it. The template itself is not
// rendered: the Jobs are, as they are made.
//
// A DeferPolicy the template names that does not exist yet is a warning,
// not a refusal: it is read again for every Job, and a CronJob and its
// policy are often applied together in either order.
func (h *Handlers) ValidateCronJob(ctx context.Context, req admission.Request) admission.Response {
	cj, check, err := review.CronJob(&req.AdmissionRequest)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !check {
		return admission.Allowed("")
	}
	job := render.CronJobJob(cj)
	warnings := render.Warnings(job)
	name := resolve.JobPolicyName(job)
	intro := fmt.Sprintf("kdefer would refuse every Job of this CronJob (its spec.jobTemplate carries label %s=true; the fields below are the Job's, under spec.jobTemplate)", v1.LabelEnabled)
	applied, err := h.resolvePolicy(ctx, resolve.JobSubject(job))
	switch {
	case apierrors.IsNotFound(err):
		warnings = append(warnings, policyMissing(job.Namespace, name)+"; until it exists, every Job of this CronJob is refused")
		return admission.Allowed("").WithWarnings(warnings...)
	case err != nil:
		return policyDenial(job.Namespace, name, intro, err)
	}
	if _, err := render.Job(job, applied.Spec(), h.opts.Render); err != nil {
		logf.FromContext(ctx).V(1).Info("refused cronjob", "cronjob", req.Namespace+"/"+review.Name(&req.AdmissionRequest), "problems", render.Problems(err))
		return denial(intro, err)
	}
	return admission.Allowed("").WithWarnings(warnings...)
}
