package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// JobSummary is the kdefer.io/summary annotation of a Job for its runs, e.g.
// "3/3 staged out" or "1/3 staged out, 1 failed, 1 skipped, 0 running"; a
// succeeded run that is Incomplete counts as staged out and is named too
// ("2/2 staged out, 1 incomplete"): its volume is kept.
func JobSummary(runs []v1.DeferRun) string {
	var ok, incomplete, failed, skipped, open int
	for i := range runs {
		c := runs[i].Status.Conditions
		switch {
		case meta.IsStatusConditionTrue(c, v1.DeferRunSucceeded):
			ok++
			if meta.IsStatusConditionTrue(c, v1.DeferRunIncomplete) {
				incomplete++
			}
		case meta.IsStatusConditionTrue(c, v1.DeferRunFailed):
			failed++
		case meta.IsStatusConditionTrue(c, v1.DeferRunSkipped):
			skipped++
		default:
			open++
		}
	}
	parts := []string{fmt.Sprintf("%d/%d staged out", ok, len(runs))}
	if incomplete > 0 {
		parts = append(parts, fmt.Sprintf("%d incomplete", incomplete))
	}
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

// summaryInterval is the least time between two summary writes of one Job,
// so runs of a Job that finish together cost a write or two, not one each.
const summaryInterval = 2 * time.Second

// JobReconciler keeps a Job's kdefer.io/summary annotation current (keyed by
// Job and written at most once per summaryInterval, it coalesces a burst of
// finishing runs into few writes and catches up after a restart), and
// deletes the finished runs of a Job that is gone: runs are not owned by
// their Job (see BuildRun), so this is how deleting a Job cleans them up.
type JobReconciler struct {
	client    client.Client
	apiReader client.Reader
	clock     clock.Clock

	mu sync.Mutex
	// written is when each Job's summary was last written, while it is
	// less than summaryInterval ago.
	written map[types.NamespacedName]time.Time
}

// NewJobReconciler returns the Job reconciler; apiReader confirms a Job the
// cache does not hold (not labelled kdefer.io/enabled) is really gone.
func NewJobReconciler(c client.Client, apiReader client.Reader, clk clock.Clock) *JobReconciler {
	return &JobReconciler{client: c, apiReader: apiReader, clock: clk, written: map[types.NamespacedName]time.Time{}}
}

// summaryDue says how long a Job's next summary write has to wait.
func (r *JobReconciler) summaryDue(key types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.written[key]
	if !ok {
		return 0
	}
	if wait := summaryInterval - r.clock.Since(last); wait > 0 {
		return wait
	}
	delete(r.written, key)
	return 0
}

func (r *JobReconciler) summaryWritten(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.written[key] = r.clock.Now()
}

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;patch

// Reconcile gets the Job and hands it to reconcile.
func (r *JobReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	job := &batchv1.Job{}
	if err := r.client.Get(ctx, req.NamespacedName, job); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("reading the Job: %w", err)
		}
		job = nil
	}
	var list v1.DeferRunList
	if err := r.client.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingFields{IndexRunJob: req.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the Job's runs: %w", err)
	}
	if err := r.deleteOrphanedRuns(ctx, req.NamespacedName, job, list.Items); err != nil {
		return quiet(ctx, reconcile.Result{}, err)
	}
	if job == nil {
		r.mu.Lock()
		delete(r.written, req.NamespacedName)
		r.mu.Unlock()
		return reconcile.Result{}, nil
	}
	res, err := r.reconcile(ctx, job, list.Items)
	return quiet(ctx, res, err)
}

// deleteOrphanedRuns deletes the finished runs of Jobs of this name that are
// gone or being deleted (job nil or deleting, or a new Job with another UID). A run deleted
// unfinished would stop, so unfinished ones wait: their finishing brings
// this reconciler back.
func (r *JobReconciler) deleteOrphanedRuns(ctx context.Context, key types.NamespacedName, job *batchv1.Job, runs []v1.DeferRun) error {
	var orphans []*v1.DeferRun
	for i := range runs {
		run := &runs[i]
		if run.DeletionTimestamp != nil || !v1.Finished(run) || (job != nil && job.DeletionTimestamp == nil && run.Labels[labelJobUID] == string(job.UID)) {
			continue
		}
		orphans = append(orphans, run)
	}
	if len(orphans) == 0 {
		return nil
	}
	if job == nil && r.apiReader != nil {
		// Not in the cache: make sure it is gone, not merely unlabelled.
		live := &batchv1.Job{}
		err := r.apiReader.Get(ctx, key, live)
		if err == nil {
			job = live
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading the Job from the API server: %w", err)
		}
	}
	for _, run := range orphans {
		if job != nil && job.DeletionTimestamp == nil && run.Labels[labelJobUID] == string(job.UID) {
			continue
		}
		log.FromContext(ctx).Info("deleting the finished run of a deleted job", "deferrun", run.Name)
		if err := r.client.Delete(ctx, run, client.Preconditions{UID: &run.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting run %s of a deleted Job: %w", run.Name, err)
		}
	}
	return nil
}

func (r *JobReconciler) reconcile(ctx context.Context, job *batchv1.Job, all []v1.DeferRun) (reconcile.Result, error) {
	var runs []v1.DeferRun
	for _, run := range all {
		if run.Labels[labelJobUID] == string(job.UID) {
			runs = append(runs, run)
		}
	}
	finished := 0
	for i := range runs {
		if v1.Finished(&runs[i]) {
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
	key := client.ObjectKeyFromObject(job)
	if wait := r.summaryDue(key); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1.AnnotationSummary, sum)
	log.FromContext(ctx).V(1).Info("writing job summary", "summary", sum)
	if err := r.client.Patch(ctx, job, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.summaryWritten(key)
	Metrics.Writes.WithLabelValues("job-summary").Inc()
	return reconcile.Result{}, nil
}
