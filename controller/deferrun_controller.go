package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
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
	"github.com/kdefer/kdefer/stagecontract"
)

// RunReconciler drives a DeferRun from trigger to release: config and node
// checks, the defer pod (and the namespace's PDB), the outcome, the volume,
// the TTL.
type RunReconciler struct {
	client    client.Client
	apiReader client.Reader // uncached reads (Secrets: never cached)
	recorder  events.EventRecorder
	clock     clock.Clock
	opts      DeferPodOptions
	exp       *expectations

	secretMu sync.Mutex
	// secretSeen is when each credentials Secret was last seen to exist,
	// for secretTTL: Secrets are not cached, so without it every run of a
	// burst would read its Secret from the apiserver before its defer pod.
	secretSeen map[types.NamespacedName]time.Time
	// created counts defer pod creations, to tell a burst (bookkeepingAt).
	created creationRate
}

// secretTTL is how long a Secret seen to exist is not read again.
const secretTTL = 10 * time.Second

// NewRunReconciler returns the DeferRun reconciler.
func NewRunReconciler(c client.Client, apiReader client.Reader, rec events.EventRecorder, clk clock.Clock, opts DeferPodOptions) *RunReconciler {
	return &RunReconciler{client: c, apiReader: apiReader, recorder: rec, clock: clk, opts: opts, secretSeen: map[types.NamespacedName]time.Time{}}
}

// secretExists reads whether a Secret exists, from secretSeen while it is
// fresh. A missing Secret is read again every time.
func (r *RunReconciler) secretExists(ctx context.Context, key types.NamespacedName, now time.Time) (bool, error) {
	r.secretMu.Lock()
	seen, ok := r.secretSeen[key]
	r.secretMu.Unlock()
	if ok && now.Sub(seen) < secretTTL {
		return true, nil
	}
	sec := &metav1.PartialObjectMetadata{}
	sec.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.apiReader.Get(ctx, key, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	r.secretMu.Lock()
	defer r.secretMu.Unlock()
	if len(r.secretSeen) > 1024 {
		for k, t := range r.secretSeen {
			if now.Sub(t) >= secretTTL {
				delete(r.secretSeen, k)
			}
		}
	}
	r.secretSeen[key] = now
	return true, nil
}

// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;update;patch;delete
// The defer pod's owner references to its PVCs block their deletion; where the
// OwnerReferencesPermissionEnforcement admission plugin is on, that needs:
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;patch

// Reconcile gets the DeferRun and hands it to reconcile.
func (r *RunReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	run := &v1.DeferRun{}
	if err := r.client.Get(ctx, req.NamespacedName, run); err != nil {
		if apierrors.IsNotFound(err) {
			run.Name, run.Namespace = req.Name, req.Namespace
			if r.exp.satisfied("DeferRun", run, nil) {
				r.exp.forget("DeferRun", run) // deleted (not just created and uncached)
			}
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !r.exp.satisfied("DeferRun", run, run) {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the cache is behind our own write
	}
	res, err := r.reconcile(ctx, run)
	return quiet(ctx, res, err)
}

// runState is one pass over a run: the status being built, the events to
// emit once it is written, and follow-up actions.
type runState struct {
	run         *v1.DeferRun
	status      *v1.DeferRunStatus
	now         time.Time
	result      reconcile.Result
	events      []event
	finishedNow bool
	deleteRun   bool
	// skipReason, skipMsg: this pass classified the pod and found that the
	// run is skipped (a forced deletion, or a skip asked for on the pod or
	// Job); the status write that records the trigger finishes the run.
	skipReason, skipMsg string
	// created: this pass created the defer pod and ends there, writing
	// nothing else; the bookkeeping pass records trigger and status.
	created bool
	// postponed: the defer pod runs, younger than bookkeepingDelay, and the
	// trigger is not stored yet: nothing is written before the bookkeeping
	// pass (or the outcome, if the pod is done first).
	postponed bool
}

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
			return reconcile.Result{}, err
		}
		r.exp.expect("DeferRun", run)
		return reconcile.Result{}, nil
	}
	s := &runState{run: run, status: run.Status.DeepCopy(), now: r.clock.Now()}
	var err error
	switch {
	case Finished(run):
		err = r.afterFinish(ctx, s)
	case run.DeletionTimestamp != nil:
		// Deleted before it finished (by a person, or with its namespace):
		// stop, release the volume, and let it go.
		err = r.finish(ctx, s, v1.DeferRunSkipped, ReasonRunDeleted, "the DeferRun was deleted before it finished", r.deferPod(ctx, run))
	case s.status.Trigger == "":
		// Armed until the pod ends: nothing to write then. The Armed
		// condition and the trigger come with the first status write that
		// has more to say (StagingOut, or the outcome), which saves one
		// write per pod each.
		var triggered bool
		if triggered, err = r.trigger(ctx, s); triggered && err == nil {
			err = r.execute(ctx, s)
		}
	default:
		err = r.execute(ctx, s)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if s.postponed {
		return s.result, nil
	}
	if s.created {
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
	r.emit(ctx, s)
	if run.DeletionTimestamp != nil && Finished(run) && meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunVolumeReleased) {
		if err := r.deleteLeftoverDeferPod(ctx, run); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, r.removeFinalizer(ctx, run)
	}
	if s.deleteRun {
		log.FromContext(ctx).Info("deleting defer run after its TTL")
		return reconcile.Result{}, client.IgnoreNotFound(r.client.Delete(ctx, run, client.Preconditions{UID: &run.UID}))
	}
	return s.result, nil
}

// deferPod returns the run's defer pod from the cache, nil if none.
func (r *RunReconciler) deferPod(ctx context.Context, run *v1.DeferRun) *corev1.Pod {
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: DeferPodName(run)}, pod); err != nil || !IsDeferPodOf(pod, run) {
		return nil
	}
	return pod
}

// trigger classifies the run's pod into s.status. The pod side only arms;
// the run side reacts to the pod's end itself, so a defer pod is one queue
// hop and one write away from it. The trigger is stored with the next status
// write; until then every pass classifies again: the pod is held by kdefer's
// finalizer until the run is final, and once the defer pod exists its
// environment is authoritative (trigger, node), and its creation time is
// when the trigger was seen.
func (r *RunReconciler) trigger(ctx context.Context, s *runState) (bool, error) {
	run := s.run
	pod := &corev1.Pod{}
	var class Classification
	var job *batchv1.Job
	err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.PodName}, pod)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && pod.UID != run.Spec.PodUID):
		// The pod is gone without a trigger (its finalizer was removed by
		// hand): stage out whatever is on the volume.
		pod, class = nil, Classification{Done: true, Trigger: v1.TriggerDeleted}
	case err != nil:
		return false, err
	default:
		job = jobOf(ctx, r.client, pod)
		class = Classify(pod, job)
		if !class.Done {
			lost, wait, err := nodeLost(ctx, r.client, s.now, pod, run)
			if err != nil || !lost {
				if wait > 0 {
					s.requeueAt(s.now.Add(wait))
				}
				return false, err
			}
			log.FromContext(ctx).Info("node lost", "node", pod.Spec.NodeName)
			class = Classification{Done: true, Trigger: v1.TriggerNodeLost, ExitCodes: exitCodes(pod)}
		}
	}
	node, at := "", s.now
	if pod != nil {
		node = pod.Spec.NodeName
	}
	dp := &corev1.Pod{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: DeferPodName(run)}, dp); err == nil && IsDeferPodOf(dp, run) {
		for _, e := range dp.Spec.Containers[0].Env {
			switch {
			case e.Name == stagecontract.EnvTrigger && v1.Trigger(e.Value).IsValid():
				class.Trigger = v1.Trigger(e.Value)
			case e.Name == stagecontract.EnvNode:
				node = e.Value
			}
		}
		if t := dp.CreationTimestamp.Time; !t.IsZero() && t.Before(at) {
			at = t
		}
	}
	applyTrigger(s.status, class, node, at)
	switch {
	case class.Skip:
		s.skipReason, s.skipMsg = ReasonForceDeleted, "the pod was deleted with grace period 0 before its containers ended"
	case pod != nil && skipRequested(pod, job):
		s.skipReason, s.skipMsg = ReasonSkipped, fmt.Sprintf("annotation %s on the pod or Job", v1.AnnotationSkip)
	}
	return true, nil
}

// applyTrigger records in st why the run's pod ended, on which node, and
// when that was seen (in memory; the pass's status write stores it).
func applyTrigger(st *v1.DeferRunStatus, class Classification, node string, at time.Time) {
	st.Trigger = class.Trigger
	st.ExitCodes = class.ExitCodes
	st.NodeName = node
	if st.TriggeredAt == nil {
		st.TriggeredAt = &metav1.Time{Time: at}
	}
}

// execute runs a triggered, unfinished run one step further.
func (r *RunReconciler) execute(ctx context.Context, s *runState) error {
	run := s.run
	trig := s.status.Trigger
	s.cond(v1.DeferRunArmed, true, ReasonArmed, fmt.Sprintf("work volume of pod %s co-owned", run.Spec.PodName))
	s.cond(v1.DeferRunTriggered, true, string(trig), fmt.Sprintf("pod %s ended: %s (exit code %d)", run.Spec.PodName, trig, ExitCode(s.status.ExitCodes)))
	if s.status.TriggeredAt == nil {
		s.status.TriggeredAt = &metav1.Time{Time: s.now}
	}
	reason, msg := skipOf(run)
	if reason == "" {
		reason, msg = s.skipReason, s.skipMsg
	}
	if reason != "" {
		return r.finish(ctx, s, v1.DeferRunSkipped, reason, msg, nil)
	}
	if done, err := r.checkConfig(ctx, s); done || err != nil {
		return err
	}
	steps := Steps(s.view(), r.opts)
	if len(steps) == 0 {
		reason := ReasonNothingToRun
		if run.Spec.Policy.RuleFor(trig).Action == v1.TriggerActionSkip {
			reason = ReasonRuleSkip
		}
		return r.finish(ctx, s, v1.DeferRunSkipped, reason, fmt.Sprintf("no step runs for trigger %s", trig), nil)
	}
	pod := &corev1.Pod{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: DeferPodName(run)}, pod)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return err
	}
	if pod != nil && !IsDeferPodOf(pod, run) {
		return fmt.Errorf("pod %s exists and is not this run's defer pod", pod.Name)
	}
	relocate, done, err := r.checkNode(ctx, s, pod)
	if done || err != nil {
		return err
	}
	if pod == nil || (pod.DeletionTimestamp != nil && !podTerminal(pod)) {
		if pod != nil {
			s.requeueAt(s.now.Add(2 * time.Second)) // evicted or deleted: re-created once gone
			return nil
		}
		return r.startDeferPod(ctx, s, relocate)
	}
	return r.observe(ctx, s, pod)
}

// checkConfig re-resolves a policy that could not be resolved when the run
// was armed, and checks the credentials Secret exists. It keeps the volume
// and waits (within the deadline) while something is missing.
func (r *RunReconciler) checkConfig(ctx context.Context, s *runState) (bool, error) {
	run := s.run
	problem, reason := "", ""
	if msg, ok := run.Annotations[annotationConfigError]; ok {
		spec, perr, err := r.resolvePolicy(ctx, run)
		if err != nil {
			return true, err
		}
		if perr == "" {
			// Fixed: take the snapshot now, and go on in the next pass.
			orig := run.DeepCopy()
			run.Spec.Policy = spec
			delete(run.Annotations, annotationConfigError)
			log.FromContext(ctx).Info("resolving the policy that was missing when the run was armed", "was", msg)
			if err := r.client.Patch(ctx, run, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
				return true, err
			}
			r.exp.expect("DeferRun", run)
			return true, errRequeue
		}
		problem, reason = perr, ReasonPolicyNotFound
		if run.Spec.PolicyName == "" {
			reason = ReasonBadAnnotation
		}
	}
	if problem == "" && run.Spec.Policy.Credentials != nil && run.Spec.Policy.StageOut != nil && s.status.DeferPodName == "" {
		name := run.Spec.Policy.Credentials.Name
		found, err := r.secretExists(ctx, types.NamespacedName{Namespace: run.Namespace, Name: name}, s.now)
		switch {
		case err != nil:
			return true, err
		case !found:
			problem, reason = fmt.Sprintf("Secret %s/%s named as stage-out credentials does not exist: create it (e.g. kubectl create secret generic %s --from-literal=AWS_ACCESS_KEY_ID=... --from-literal=AWS_SECRET_ACCESS_KEY=...)", run.Namespace, name, name), ReasonSecretNotFound
		}
	}
	if problem == "" {
		if c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunConfigError); c != nil && c.Status == metav1.ConditionTrue {
			s.cond(v1.DeferRunConfigError, false, ReasonResolved, "configuration resolved")
			s.events = append(s.events, event{corev1.EventTypeNormal, ReasonResolved, "configuration resolved; the run proceeds", false})
		}
		return false, nil
	}
	deadline := s.status.TriggeredAt.Add(run.Spec.Policy.Deadline.Duration)
	if !s.now.Before(deadline) {
		return true, r.finish(ctx, s, v1.DeferRunFailed, ReasonConfigError, problem+" (deadline passed; the work volume is kept per policy)", nil)
	}
	if c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunConfigError); c == nil || c.Status != metav1.ConditionTrue || c.Message != problem {
		s.events = append(s.events, event{corev1.EventTypeWarning, reason, problem, false})
	}
	s.cond(v1.DeferRunConfigError, true, reason, problem)
	s.requeueAt(s.now.Add(10 * time.Second))
	return true, nil
}

// resolvePolicy computes the effective policy from the named DeferPolicy and
// the annotations the run copied from its pod. perr describes what is wrong.
func (r *RunReconciler) resolvePolicy(ctx context.Context, run *v1.DeferRun) (v1.DeferPolicySpec, string, error) {
	var spec *v1.DeferPolicySpec
	if run.Spec.PolicyName != "" {
		pol := &v1.DeferPolicy{}
		err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.PolicyName}, pol)
		if apierrors.IsNotFound(err) {
			return v1.DeferPolicySpec{}, policyNotFound(run.Namespace, run.Spec.PolicyName), nil
		}
		if err != nil {
			return v1.DeferPolicySpec{}, "", err
		}
		spec = &pol.Spec
	}
	eff, err := EffectivePolicy(spec, run.Annotations)
	if err != nil {
		return eff, err.Error(), nil
	}
	return eff, "", nil
}

// checkNode waits for a NotReady or missing node; once nodeLostTimeout has
// passed, a run whose volumes are not node-local is relocated (the scheduler
// places its defer pod where the volume can attach), any other fails with
// reason NodeLost, keeping the volume.
func (r *RunReconciler) checkNode(ctx context.Context, s *runState, pod *corev1.Pod) (relocate, done bool, err error) {
	if pod != nil && (podTerminal(pod) || pod.Spec.NodeName != s.status.NodeName) {
		return false, false, nil // finished, or already relocated
	}
	if s.status.NodeName == "" {
		// The pod never ran on a node (deleted before it was scheduled, or
		// gone before its node was known): the scheduler places the defer
		// pod, honouring the PV's node affinity.
		return pod == nil, false, nil
	}
	var node *corev1.Node
	n := &corev1.Node{}
	err = r.client.Get(ctx, types.NamespacedName{Name: s.status.NodeName}, n)
	switch {
	case err == nil:
		node = n
	case !apierrors.IsNotFound(err):
		return false, true, err
	}
	since := s.status.TriggeredAt.Time
	if s.status.Trigger == v1.TriggerNodeLost && s.run.Spec.Policy.NodeLostTimeout != nil {
		// The pod side already waited nodeLostTimeout for this node.
		since = since.Add(-s.run.Spec.Policy.NodeLostTimeout.Duration)
	}
	v := JudgeNode(node, s.view(), since, s.now)
	switch {
	case v.Ready:
		return false, false, nil
	case v.Lost:
		if pod == nil {
			movable, err := r.volumesMovable(ctx, s.run)
			if err != nil {
				return false, true, err
			}
			if movable {
				s.events = append(s.events, event{corev1.EventTypeWarning, "Relocated", fmt.Sprintf("node %s is lost; the work volume is not node-local, so the defer pod runs elsewhere", s.status.NodeName), false})
				return true, false, nil
			}
		}
		return false, true, r.finish(ctx, s, v1.DeferRunFailed, ReasonNodeLost, v.Message, pod)
	}
	if c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunStagingOut); c == nil || c.Reason != ReasonNodeNotReady {
		s.events = append(s.events, event{corev1.EventTypeWarning, ReasonNodeNotReady, v.Message, false})
	}
	s.cond(v1.DeferRunStagingOut, false, ReasonNodeNotReady, v.Message)
	s.requeueAt(v.RetryAt)
	return false, true, nil
}

// volumesMissing reports whether no work PVC of run exists that a pod could
// mount (absent, or being deleted), asking the API server: the cache may be
// behind a PVC created a moment ago.
func (r *RunReconciler) volumesMissing(ctx context.Context, run *v1.DeferRun) (bool, error) {
	for _, v := range run.Spec.Volumes {
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v.ClaimName}, pvc)
		if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		if err == nil && pvc.DeletionTimestamp == nil {
			return false, nil
		}
	}
	return true, nil
}

// volumesMovable reports whether every work volume is bound to a PV that is
// not pinned to one node (no kubernetes.io/hostname in its node affinity),
// so a defer pod elsewhere can mount it. Uncached reads: a rare path.
func (r *RunReconciler) volumesMovable(ctx context.Context, run *v1.DeferRun) (bool, error) {
	for _, v := range run.Spec.Volumes {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v.ClaimName}, pvc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if pvc.Spec.VolumeName == "" {
			return false, nil
		}
		pv := &corev1.PersistentVolume{}
		if err := r.apiReader.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if NodeLocal(pv) {
			return false, nil
		}
	}
	return len(run.Spec.Volumes) > 0, nil
}

// NodeLocal reports whether a PV can only be used on one node.
func NodeLocal(pv *corev1.PersistentVolume) bool {
	if pv.Spec.Local != nil || pv.Spec.HostPath != nil {
		return true
	}
	if a := pv.Spec.NodeAffinity; a != nil && a.Required != nil {
		for _, term := range a.Required.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == corev1.LabelHostname {
					return true
				}
			}
		}
	}
	return false
}

// startDeferPod creates the defer pod (its fixed name makes a pass after a
// crash find it instead of creating another), then makes sure the
// namespace's PodDisruptionBudget exists: usually a cache read, a write only
// for the first defer pod of a namespace. The pod goes first because it is
// what the reaction time is measured to; the budget only matters once the
// pod runs (the Eviction API ignores budgets for Pending pods).
func (r *RunReconciler) startDeferPod(ctx context.Context, s *runState, relocate bool) error {
	run := s.view()
	pod := BuildDeferPod(run, r.opts)
	pvcs := map[string]*corev1.PersistentVolumeClaim{}
	for _, v := range run.Spec.Volumes {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v.ClaimName}, pvc); err == nil && pvc.DeletionTimestamp == nil {
			pvcs[v.ClaimName] = pvc
		}
	}
	if len(pvcs) == 0 && len(run.Spec.Volumes) > 0 {
		missing, err := r.volumesMissing(ctx, run)
		if err != nil {
			return err
		}
		if missing {
			// No defer pod could mount them: never created (the PVC's
			// creation failed after the arming webhook made the run), or
			// deleted by someone.
			return r.finish(ctx, s, v1.DeferRunSkipped, ReasonVolumeMissing,
				fmt.Sprintf("no work PVC of pod %s exists (%s): there is nothing to stage out", run.Spec.PodName, run.Spec.Volumes[0].ClaimName), nil)
		}
	}
	OwnByVolumes(pod, run, pvcs)
	if relocate {
		pod.Spec.NodeName = "" // the scheduler places it where the volume can attach
	}
	log.FromContext(ctx).Info("creating defer pod", "pod", pod.Name, "node", pod.Spec.NodeName, "trigger", run.Status.Trigger)
	if err := r.client.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return errRequeue
		}
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			// Nothing can be created in a namespace being deleted, and its
			// volumes go with it: retrying would hold the namespace forever.
			return r.finish(ctx, s, v1.DeferRunSkipped, ReasonNamespaceDeleted,
				fmt.Sprintf("namespace %s is being deleted: no defer pod can run in it", run.Namespace), nil)
		}
		return err
	}
	Metrics.Writes.WithLabelValues("defer-pod").Inc()
	r.created.add(s.now)
	Metrics.Reaction.Observe(r.clock.Since(s.status.TriggeredAt.Time).Seconds())
	s.created = true
	return r.ensurePDB(ctx, run)
}

// ensurePDB creates the namespace's defer-pod PodDisruptionBudget (see
// BuildDeferPDB) if the cache does not hold it.
func (r *RunReconciler) ensurePDB(ctx context.Context, run *v1.DeferRun) error {
	pdb := BuildDeferPDB(run)
	err := r.client.Get(ctx, client.ObjectKeyFromObject(pdb), &policyv1.PodDisruptionBudget{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	log.FromContext(ctx).Info("creating the namespace's defer pod disruption budget", "pdb", pdb.Name)
	if err := r.client.Create(ctx, pdb); err != nil {
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil
		}
		return err
	}
	Metrics.Writes.WithLabelValues("pdb").Inc()
	return nil
}

// observe reads the defer pod's status into the run and finishes the run
// when the pod says it is over.
func (r *RunReconciler) observe(ctx context.Context, s *runState, pod *corev1.Pod) error {
	if !podTerminal(pod) && pod.DeletionTimestamp == nil {
		if err := r.ensurePDB(ctx, s.run); err != nil {
			return err
		}
	}
	o := Observe(pod, *s.run.Spec.Policy.RetryLimit)
	if s.status.DeferPodName != pod.Name {
		s.events = append(s.events, event{corev1.EventTypeNormal, "DeferPodCreated", fmt.Sprintf("defer pod %s created on node %s for trigger %s", pod.Name, pod.Spec.NodeName, s.status.Trigger), true})
	}
	s.status.DeferPodName = pod.Name
	if s.status.StartTime == nil {
		t := pod.CreationTimestamp
		if t.IsZero() {
			t = metav1.Time{Time: s.now}
		}
		s.status.StartTime = &t
	}
	s.status.Steps = o.Steps
	if o.Summary != nil {
		s.status.Bytes, s.status.Objects, s.status.Skipped = o.Summary.Bytes, o.Summary.Objects, o.Summary.Skipped
		s.status.ManifestURL = o.Summary.ManifestURL
	}
	if !o.Done {
		if at := bookkeepingAt(pod.CreationTimestamp.Time, s.now, r.created.burst(s.now)); s.run.Status.Trigger == "" && !at.IsZero() {
			// A kubelet status update before the bookkeeping pass, or a
			// burst of defer pod creations going on: nothing worth a
			// write yet.
			s.postponed = true
			s.requeueAt(at)
			return nil
		}
		s.cond(v1.DeferRunStagingOut, true, ReasonStagingOut, fmt.Sprintf("defer pod %s on node %s", pod.Name, pod.Spec.NodeName))
		return nil
	}
	if o.Failed {
		return r.finish(ctx, s, v1.DeferRunFailed, o.Reason, o.Message, pod)
	}
	msg := "every step succeeded"
	if o.Summary != nil {
		msg = fmt.Sprintf("staged out %d objects (%d bytes, %d already there) to %s", o.Summary.Objects, o.Summary.Bytes, o.Summary.Skipped, o.Summary.ManifestURL)
	}
	return r.finish(ctx, s, v1.DeferRunSucceeded, ReasonSucceeded, msg, pod)
}

// finish marks the run final, stops a defer pod that still runs, and handles
// the volume per policy.
func (r *RunReconciler) finish(ctx context.Context, s *runState, typ, reason, msg string, pod *corev1.Pod) error {
	if pod != nil && !podTerminal(pod) && pod.DeletionTimestamp == nil {
		log.FromContext(ctx).Info("stopping defer pod", "pod", pod.Name, "reason", reason)
		if err := r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	s.cond(typ, true, reason, msg)
	if meta.FindStatusCondition(s.status.Conditions, v1.DeferRunStagingOut) != nil {
		s.cond(v1.DeferRunStagingOut, false, reason, "")
	}
	if c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunConfigError); c != nil && c.Status == metav1.ConditionTrue && reason != ReasonConfigError {
		s.cond(v1.DeferRunConfigError, false, ReasonResolved, "")
	}
	s.status.CompletionTime = &metav1.Time{Time: s.now}
	s.finishedNow = true
	evType := corev1.EventTypeNormal
	if typ == v1.DeferRunFailed {
		evType = corev1.EventTypeWarning
	}
	s.events = append(s.events, event{evType, reason, fmt.Sprintf("defer run of pod %s %s: %s", s.run.Spec.PodName, typ, msg), false})
	return r.handleVolume(ctx, s)
}

// afterFinish: release a retained volume when due, stop a leftover defer
// pod, delete the run after its TTL.
func (r *RunReconciler) afterFinish(ctx context.Context, s *runState) error {
	if err := r.handleVolume(ctx, s); err != nil {
		return err
	}
	if exp, ok := TTLExpiry(&v1.DeferRun{ObjectMeta: s.run.ObjectMeta, Spec: s.run.Spec, Status: *s.status}); ok && s.run.DeletionTimestamp == nil {
		if !s.now.Before(exp) {
			s.deleteRun = true
		} else {
			s.requeueAt(exp)
		}
	}
	return nil
}

// handleVolume deletes the work PVCs when ShouldRelease says so, else records
// that they are kept and when they are due.
func (r *RunReconciler) handleVolume(ctx context.Context, s *runState) error {
	if meta.IsStatusConditionTrue(s.status.Conditions, v1.DeferRunVolumeReleased) {
		return nil
	}
	view := &v1.DeferRun{ObjectMeta: s.run.ObjectMeta, Spec: s.run.Spec, Status: *s.status}
	release, due := ShouldRelease(view, s.now)
	if !release {
		msg := fmt.Sprintf("work volume kept for inspection or a rerun; release it with `kdefer release deferrun/%s`", s.run.Name)
		if !due.IsZero() {
			msg += fmt.Sprintf(" (released automatically at %s)", due.UTC().Format(time.RFC3339))
			s.requeueAt(due)
		}
		s.cond(v1.DeferRunVolumeReleased, false, ReasonRetained, msg)
		return nil
	}
	for _, v := range s.run.Spec.Volumes {
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.client.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: v.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if !HasOwner(pvc.OwnerReferences, s.run) && !ownedBy(pvc.OwnerReferences, s.run.Spec.PodUID) {
			continue // someone else's PVC of that name
		}
		if pvc.DeletionTimestamp != nil {
			continue
		}
		log.FromContext(ctx).Info("releasing work volume", "pvc", pvc.Name)
		// Foreground: the garbage collector deletes the defer pod, which
		// the PVC owns (OwnByVolumes), so nothing holds the PVC after it.
		if err := r.client.Delete(ctx, pvc, client.Preconditions{UID: &pvc.UID}, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
			return err
		}
		r.exp.forget("PersistentVolumeClaim", pvc)
		Metrics.Writes.WithLabelValues("release-volume").Inc()
	}
	s.cond(v1.DeferRunVolumeReleased, true, ReasonReleased, "work volume deleted")
	s.events = append(s.events, event{corev1.EventTypeNormal, "VolumeReleased", "work volume deleted", true})
	return nil
}

// writeStatus is the pass's one status write, skipped when nothing changed.
func (r *RunReconciler) writeStatus(ctx context.Context, s *runState) error {
	s.status.State = State(s.status)
	for i := range s.status.Conditions {
		// A policy resolved after a config error bumped the generation.
		s.status.Conditions[i].ObservedGeneration = s.run.Generation
	}
	if equality.Semantic.DeepEqual(&s.run.Status, s.status) {
		return nil
	}
	s.run.Status = *s.status
	if err := r.client.Status().Update(ctx, s.run); err != nil {
		return err
	}
	r.exp.expect("DeferRun", s.run)
	Metrics.Writes.WithLabelValues("status").Inc()
	if s.finishedNow {
		Metrics.Runs.WithLabelValues(string(s.status.Trigger), s.status.State).Inc()
		Metrics.StageBytes.Add(float64(s.status.Bytes))
	}
	return nil
}

// emit sends the pass's events, on the run and on its Job, after the status
// they describe is stored.
func (r *RunReconciler) emit(ctx context.Context, s *runState) {
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

// deleteLeftoverDeferPod deletes the defer pod of a run that goes, if its
// volumes did not take it with them (their release is normally a foreground
// deletion that does; a PVC deleted by someone else in the background waits
// for the pod instead). A pod owned by the run goes with the run.
func (r *RunReconciler) deleteLeftoverDeferPod(ctx context.Context, run *v1.DeferRun) error {
	pod := r.deferPod(ctx, run)
	if pod == nil || pod.DeletionTimestamp != nil || metav1.IsControlledBy(pod, run) {
		return nil
	}
	log.FromContext(ctx).Info("deleting defer pod of a deleted run", "pod", pod.Name)
	return client.IgnoreNotFound(r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}))
}

func (r *RunReconciler) removeFinalizer(ctx context.Context, run *v1.DeferRun) error {
	if !controllerutil.ContainsFinalizer(run, v1.DeferRunFinalizer) {
		return nil
	}
	orig := run.DeepCopy()
	controllerutil.RemoveFinalizer(run, v1.DeferRunFinalizer)
	log.FromContext(ctx).Info("removing defer run finalizer")
	r.exp.forget("DeferRun", run)
	return client.IgnoreNotFound(r.client.Patch(ctx, run, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})))
}

func skipOf(run *v1.DeferRun) (string, string) {
	if run.Annotations[AnnotationRelease] == "true" {
		return ReasonReleasedByHand, "released by hand before the run finished"
	}
	if run.Annotations[v1.AnnotationSkip] == "true" {
		return ReasonSkipped, fmt.Sprintf("annotation %s on the pod or Job", v1.AnnotationSkip)
	}
	return "", ""
}

func podTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
