package controller

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// JobSummary is the kdefer.io/summary annotation of a Job for its runs, e.g.
// "3/3 staged out" or "1/3 staged out, 1 failed, 1 skipped, 0 running".
func JobSummary(runs []v1.DeferRun) string {
	var ok, failed, skipped, open int
	for i := range runs {
		c := runs[i].Status.Conditions
		switch {
		case meta.IsStatusConditionTrue(c, v1.DeferRunSucceeded):
			ok++
		case meta.IsStatusConditionTrue(c, v1.DeferRunFailed):
			failed++
		case meta.IsStatusConditionTrue(c, v1.DeferRunSkipped):
			skipped++
		default:
			open++
		}
	}
	parts := []string{fmt.Sprintf("%d/%d staged out", ok, len(runs))}
	if failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", failed))
	}
	if skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d skipped", skipped))
	}
	if open > 0 {
		parts = append(parts, fmt.Sprintf("%d pending", open))
	}
	return strings.Join(parts, ", ")
}

// JobReconciler keeps a Job's kdefer.io/summary annotation current. Keyed by
// Job, it coalesces a burst of finishing runs into few writes, and catches up
// after a restart.
type JobReconciler struct {
	client client.Client
}

// NewJobReconciler returns the Job summary reconciler.
func NewJobReconciler(c client.Client) *JobReconciler { return &JobReconciler{client: c} }

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;patch

// Reconcile gets the Job and hands it to reconcile.
func (r *JobReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	job := &batchv1.Job{}
	if err := r.client.Get(ctx, req.NamespacedName, job); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	res, err := r.reconcile(ctx, job)
	return quiet(ctx, res, err)
}

func (r *JobReconciler) reconcile(ctx context.Context, job *batchv1.Job) (reconcile.Result, error) {
	var list v1.DeferRunList
	if err := r.client.List(ctx, &list, client.InNamespace(job.Namespace), client.MatchingFields{IndexRunJob: job.Name}); err != nil {
		return reconcile.Result{}, err
	}
	var runs []v1.DeferRun
	for _, run := range list.Items {
		if run.Labels[labelJobUID] == string(job.UID) {
			runs = append(runs, run)
		}
	}
	finished := 0
	for i := range runs {
		if Finished(&runs[i]) {
			finished++
		}
	}
	if finished == 0 {
		return reconcile.Result{}, nil // nothing to report yet: saves a write per Job
	}
	sum := JobSummary(runs)
	if job.Annotations[v1.AnnotationSummary] == sum {
		return reconcile.Result{}, nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1.AnnotationSummary, sum)
	log.FromContext(ctx).V(1).Info("writing job summary", "summary", sum)
	if err := r.client.Patch(ctx, job, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	Metrics.Writes.WithLabelValues("job-summary").Inc()
	return reconcile.Result{}, nil
}
