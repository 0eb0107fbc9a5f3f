package controller

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

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

// updateJobSummary writes the Job's summary annotation when it changed.
// Best effort: the next finished run writes it again.
func (r *RunReconciler) updateJobSummary(ctx context.Context, run *v1.DeferRun) {
	if run.Spec.JobName == "" {
		return
	}
	var list v1.DeferRunList
	if err := r.client.List(ctx, &list, client.InNamespace(run.Namespace), client.MatchingFields{IndexRunJob: run.Spec.JobName}); err != nil {
		log.FromContext(ctx).Error(err, "listing runs of the job", "job", run.Spec.JobName)
		return
	}
	for i := range list.Items {
		if list.Items[i].Name == run.Name {
			list.Items[i].Status = run.Status // the cache may be behind our write
		}
	}
	sum := JobSummary(list.Items)
	job := &batchv1.Job{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.JobName}, job); err == nil && job.Annotations[v1.AnnotationSummary] == sum {
		return
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1.AnnotationSummary, sum)
	obj := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: run.Spec.JobName, Namespace: run.Namespace}}
	if err := r.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); client.IgnoreNotFound(err) != nil {
		log.FromContext(ctx).Error(err, "writing job summary", "job", run.Spec.JobName)
		return
	}
	Metrics.Writes.WithLabelValues("job-summary").Inc()
}
