package controller

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// RunReconciler drives a DeferRun from trigger to release: config and node
// checks, the defer pod (and the namespace's PDB), the outcome, the volume,
// the TTL.
type RunReconciler struct {
	client    client.Client
	apiReader client.Reader // uncached reads (PVCs a moment old, PVs)
	recorder  events.EventRecorder
	clock     clock.Clock
	opts      DeferPodOptions
	exp       ownWrites

	// created counts defer pod creations, to tell a burst (bookkeepingAt).
	created creationRate
}

// NewRunReconciler returns the DeferRun reconciler.
func NewRunReconciler(c client.Client, apiReader client.Reader, rec events.EventRecorder, clk clock.Clock, opts DeferPodOptions) *RunReconciler {
	return &RunReconciler{client: c, apiReader: apiReader, recorder: rec, clock: clk, opts: opts}
}

// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;update;patch;delete
// The defer pod's owner references to its PVCs block their deletion; where the
// OwnerReferencesPermissionEnforcement admission plugin is on, that needs:
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;patch

// Reconcile gets the DeferRun and hands it to reconcile.
func (r *RunReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	run := &v1.DeferRun{}
	if err := r.client.Get(ctx, req.NamespacedName, run); err != nil {
		// Not found: deleted, or created and not yet cached (the creation's
		// expectation stays for the next pass; a deleted run's expires).
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !r.exp.runs.satisfied(req.NamespacedName, run) {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the cache is behind our own write
	}
	res, err := r.reconcile(ctx, run)
	return quiet(ctx, res, err)
}

// runState is one pass over a run: the status being built, the events to
// emit once it is written, and when to come back.
type runState struct {
	run         *v1.DeferRun
	status      *v1.DeferRunStatus
	now         time.Time
	result      reconcile.Result
	events      []event
	finishedNow bool
	// skipReason, skipMsg: this pass classified the pod and found that the
	// run is skipped (a forced deletion, or a skip asked for on the pod or
	// Job); the status write that records the trigger finishes the run.
	skipReason, skipMsg string
}

// passEnd is how a pass ends: what the steps decided is left to do after
// them. The steps return it; reconcile acts on it.
type passEnd int

const (
	// endWrite: write the status (if it changed), then emit the events.
	endWrite passEnd = iota
	// endCreated: this pass created the defer pod and ends there, writing
	// nothing else; the bookkeeping pass records trigger and status.
	endCreated
	// endPostponed: the defer pod runs, younger than bookkeepingDelay, and
	// the trigger is not stored yet: nothing is written before the
	// bookkeeping pass (or the outcome, if the pod is done first).
	endPostponed
	// endDelete: the finished run's TTL has passed: write the status, then
	// delete the run.
	endDelete
)

// view is the run as this pass sees it: the stored spec and metadata with
// the status being built (the trigger among it).
func (s *runState) view() *v1.DeferRun {
	return &v1.DeferRun{TypeMeta: s.run.TypeMeta, ObjectMeta: s.run.ObjectMeta, Spec: s.run.Spec, Status: *s.status}
}

type event struct {
	typ, reason, note string
	// runOnly: not repeated on the Job (progress, not an outcome).
	runOnly bool
}

func (s *runState) requeueAt(t time.Time) {
	d := t.Sub(s.now)
	if d < time.Second {
		d = time.Second
	}
	if s.result.RequeueAfter == 0 || d < s.result.RequeueAfter {
		s.result.RequeueAfter = d
	}
}

func (s *runState) cond(typ string, status bool, reason, msg string) {
	setCondition(s.status, s.run.Generation, typ, status, reason, msg)
}

func (r *RunReconciler) reconcile(ctx context.Context, run *v1.DeferRun) (reconcile.Result, error) {
	// Finalizer first, then act.
	if run.DeletionTimestamp == nil && !controllerutil.ContainsFinalizer(run, v1.DeferRunFinalizer) {
		controllerutil.AddFinalizer(run, v1.DeferRunFinalizer)
		log.FromContext(ctx).Info("adding defer run finalizer")
		if err := r.client.Update(ctx, run); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding the run's finalizer: %w", err)
		}
		r.exp.runs.expect(run)
		return reconcile.Result{}, nil
	}
	s := &runState{run: run, status: run.Status.DeepCopy(), now: r.clock.Now()}
	end, err := r.step(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch end {
	case endPostponed:
		return s.result, nil
	case endCreated:
		// Free the worker and the apiserver for the next pod's defer pod:
		// the bookkeeping (trigger and status) comes a little later, when
		// a burst of pod ends is over; a defer pod that is done by then
		// needs only the final status. The defer pod's creation event is
		// not watched for the same reason.
		return reconcile.Result{RequeueAfter: bookkeepingDelay, Priority: ptr.To(0)}, nil
	}
	if err := r.writeStatus(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	r.emit(s)
	if run.DeletionTimestamp != nil && v1.Finished(run) && meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunVolumeReleased) {
		if err := r.deleteLeftoverDeferPod(ctx, run); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, r.removeFinalizer(ctx, run)
	}
	if end == endDelete {
		log.FromContext(ctx).Info("deleting defer run after its TTL")
		if err := r.client.Delete(ctx, run, client.Preconditions{UID: &run.UID}); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting the run after its TTL: %w", err)
		}
		return reconcile.Result{}, nil
	}
	return s.result, nil
}

// step takes the run one step further, by where it is: finished, deleted
// before it finished, waiting for its pod to end, or triggered.
func (r *RunReconciler) step(ctx context.Context, s *runState) (passEnd, error) {
	run := s.run
	if run.DeletionTimestamp == nil {
		if resumed, err := r.resume(ctx, s); resumed || err != nil {
			return endWrite, err
		}
	}
	switch {
	case v1.Finished(s.view()):
		return r.afterFinish(ctx, s)
	case run.DeletionTimestamp != nil:
		// Deleted before it finished (by a person, or with its namespace):
		// stop, release the volume, and let it go.
		return endWrite, r.finish(ctx, s, v1.DeferRunSkipped, v1.ReasonRunDeleted, "the DeferRun was deleted before it finished", r.deferPod(ctx, run))
	case s.status.Trigger == "":
		// Armed until the pod ends: nothing to write then. The Armed
		// condition and the trigger come with the first status write that
		// has more to say (StagingOut, or the outcome), which saves one
		// write per pod each.
		triggered, err := r.trigger(ctx, s)
		if !triggered || err != nil {
			return endWrite, err
		}
	}
	return r.execute(ctx, s)
}

// execute runs a triggered, unfinished run one step further.
func (r *RunReconciler) execute(ctx context.Context, s *runState) (passEnd, error) {
	run := s.run
	trig := s.status.Trigger
	s.cond(v1.DeferRunArmed, true, v1.ReasonArmed, fmt.Sprintf("work volume of pod %s co-owned", run.Spec.PodName))
	s.cond(v1.DeferRunTriggered, true, string(trig), fmt.Sprintf("pod %s ended: %s (exit code %d)", run.Spec.PodName, trig, ExitCode(s.status.ExitCodes)))
	if s.status.TriggeredAt == nil {
		s.status.TriggeredAt = &metav1.Time{Time: s.now}
	}
	reason, msg := skipOf(run)
	if reason == "" {
		reason, msg = s.skipReason, s.skipMsg
	}
	if reason != "" {
		return endWrite, r.finish(ctx, s, v1.DeferRunSkipped, reason, msg, nil)
	}
	if c, err := r.checkConfig(ctx, s); c == decided || err != nil {
		return endWrite, err
	}
	if s.status.Deadline == nil {
		// Recorded once the policy is resolved (a policy created after the
		// run was armed brings its own deadline), and kept: a controller
		// restarted with another cap does not change a started run's.
		s.status.Deadline = &metav1.Duration{Duration: EffectiveDeadline(&run.Spec.Policy, r.opts.MaxDeadline)}
	}
	steps := Steps(s.view(), r.opts)
	if len(steps) == 0 && attemptOf(s.status) != "" {
		return endWrite, r.finish(ctx, s, v1.DeferRunSucceeded, v1.ReasonSucceeded, "every step had succeeded in an earlier attempt", nil)
	}
	if len(steps) == 0 {
		reason := v1.ReasonNothingToRun
		if run.Spec.Policy.RuleFor(trig).Action == v1.TriggerActionSkip {
			reason = v1.ReasonRuleSkip
		}
		return endWrite, r.finish(ctx, s, v1.DeferRunSkipped, reason, fmt.Sprintf("no step runs for trigger %s", trig), nil)
	}
	pod := &corev1.Pod{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v1.DeferPodName(run)}, pod)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return endWrite, fmt.Errorf("reading the defer pod: %w", err)
	}
	if pod != nil && !v1.IsDeferPodOf(pod, run) {
		return endWrite, fmt.Errorf("pod %s exists and is not this run's defer pod", pod.Name)
	}
	if pod != nil && pod.Annotations[v1.AnnotationAttempt] != attemptOf(s.status) {
		return endWrite, r.staleDeferPod(ctx, s, pod)
	}
	node, err := r.checkNode(ctx, s, pod)
	if node == decided || err != nil {
		return endWrite, err
	}
	if pod == nil || (pod.DeletionTimestamp != nil && !podTerminal(pod)) {
		if pod != nil {
			s.requeueAt(s.now.Add(2 * time.Second)) // evicted or deleted: re-created once gone
			return endWrite, nil
		}
		if c, err := r.checkRefusals(ctx, s); c == decided || err != nil {
			return endWrite, err
		}
		return r.startDeferPod(ctx, s, node == relocate)
	}
	return r.observe(ctx, s, pod)
}

// writeStatus is the pass's one status write, skipped when nothing changed.
func (r *RunReconciler) writeStatus(ctx context.Context, s *runState) error {
	s.status.State = v1.StateOf(s.status)
	for i := range s.status.Conditions {
		// A policy resolved after a config error bumped the generation.
		s.status.Conditions[i].ObservedGeneration = s.run.Generation
	}
	if equality.Semantic.DeepEqual(&s.run.Status, s.status) {
		return nil
	}
	s.run.Status = *s.status
	if err := r.client.Status().Update(ctx, s.run); err != nil {
		return fmt.Errorf("writing the run's status: %w", err)
	}
	r.exp.runs.expect(s.run)
	Metrics.Writes.WithLabelValues("status").Inc()
	if s.finishedNow {
		Metrics.Runs.WithLabelValues(string(s.status.Trigger), s.status.State).Inc()
		if c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunFailed); c != nil && c.Status == metav1.ConditionTrue {
			Metrics.Failures.WithLabelValues(c.Reason).Inc()
		}
		if start := attemptStart(s.status); !start.IsZero() && s.status.CompletionTime != nil {
			Metrics.Duration.WithLabelValues(s.status.State).Observe(s.status.CompletionTime.Sub(start).Seconds())
		}
		Metrics.StageBytes.Add(float64(s.status.Bytes))
		if meta.IsStatusConditionTrue(s.status.Conditions, v1.DeferRunIncomplete) {
			Metrics.Incomplete.Inc()
		}
	}
	return nil
}

// emit sends the pass's events, on the run and on its Job, after the status
// they describe is stored.
func (r *RunReconciler) emit(s *runState) {
	if r.recorder == nil {
		return
	}
	var job runtime.Object
	if uid := s.run.Labels[labelJobUID]; s.run.Spec.JobName != "" && uid != "" {
		job = &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
			ObjectMeta: metav1.ObjectMeta{Name: s.run.Spec.JobName, Namespace: s.run.Namespace, UID: types.UID(uid)}}
	}
	for _, e := range s.events {
		r.recorder.Eventf(s.run, nil, e.typ, e.reason, "DeferRun", "%s", e.note)
		if job != nil && !e.runOnly {
			r.recorder.Eventf(job, s.run, e.typ, e.reason, "DeferRun", "%s: %s", s.run.Name, e.note)
		}
	}
}
