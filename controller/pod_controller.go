package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/podstate"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/resolve"
)

// PodReconciler arms managed pods and records their trigger. Its key is the
// pod's namespace/name, which is also its DeferRun's.
type PodReconciler struct {
	client client.Client
	clock  clock.Clock
	exp    ownWrites
	// prePullImage is pulled on the nodes of armed pods (empty: off).
	prePullImage  string
	prePullPolicy corev1.PullPolicy
}

// NewPodReconciler returns the pod reconciler.
func NewPodReconciler(c client.Client, clk clock.Clock) *PodReconciler {
	return &PodReconciler{client: c, clock: clk}
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kdefer.io,resources=deferpolicies,verbs=get;list;watch

// Reconcile gets the pod and hands it to reconcile.
func (r *PodReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.exp.pods.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pod.Labels[v1.LabelManaged] != "true" {
		return reconcile.Result{}, nil
	}
	if !r.exp.pods.satisfied(req.NamespacedName, pod) {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the cache is behind our own write
	}
	res, err := r.reconcile(ctx, pod)
	return quiet(ctx, res, err)
}

// podState is what one pass over a pod knows.
type podState struct {
	pod   *corev1.Pod
	job   *batchv1.Job
	run   *v1.DeferRun // nil until armed
	pvcs  []*corev1.PersistentVolumeClaim
	class podstate.Classification
}

func (r *PodReconciler) reconcile(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	s := &podState{pod: pod}
	s.job = jobOf(ctx, r.client, pod)
	s.class = podstate.Classify(pod, s.job)

	if res, err := r.loadRun(ctx, s); err != nil || !res.IsZero() {
		return res, err // wait for the run, or for another pod's run to go
	}
	// Finalizer first, then act: a running pod without it (render not
	// applied, or removed by hand) gets it back; not a pod whose run has
	// finished or that is done, since the finalizer was removed on purpose.
	if !s.class.Done && pod.DeletionTimestamp == nil && !controllerutil.ContainsFinalizer(pod, v1.PodFinalizer) && (s.run == nil || !v1.Finished(s.run)) {
		return reconcile.Result{}, r.addPodFinalizer(ctx, pod)
	}
	if err := r.loadClaims(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	if s.run == nil {
		if len(s.pvcs) == 0 {
			if s.class.Done {
				// Nothing was ever written to a work volume: let the pod go.
				log.FromContext(ctx).V(1).Info("releasing pod without a work volume", "trigger", s.class.Trigger)
				return reconcile.Result{}, r.releasePod(ctx, pod)
			}
			return reconcile.Result{}, nil // armed on the PVC's event
		}
		if err := r.arm(ctx, s); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := r.adopt(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.propagateSkip(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.prePull(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	if v1.Finished(s.run) {
		return reconcile.Result{}, r.releasePod(ctx, pod)
	}
	return reconcile.Result{}, nil
}

// jobOf returns the pod's Job from the cache, nil if it has none or it is
// not cached (not labelled kdefer.io/enabled).
func jobOf(ctx context.Context, c client.Client, pod *corev1.Pod) *batchv1.Job {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "Job" {
		return nil
	}
	job := &batchv1.Job{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, job); err != nil || job.UID != ref.UID {
		return nil
	}
	return job
}

func (r *PodReconciler) addPodFinalizer(ctx context.Context, pod *corev1.Pod) error {
	log.FromContext(ctx).Info("adding pod finalizer")
	if err := patch(ctx, r.client, pod, func(pod *corev1.Pod) { controllerutil.AddFinalizer(pod, v1.PodFinalizer) }); err != nil {
		return fmt.Errorf("adding the pod finalizer: %w", err)
	}
	r.exp.pods.expect(pod)
	return nil
}

// loadRun finds the pod's DeferRun (s.run, nil if none). A run of the same
// name for another pod (a bare pod re-created with its name) is removed once
// finished. A non-zero result or an error ends the pass.
func (r *PodReconciler) loadRun(ctx context.Context, s *podState) (reconcile.Result, error) {
	run := &v1.DeferRun{}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(s.pod), run)
	if apierrors.IsNotFound(err) {
		if !r.exp.runs.satisfied(client.ObjectKeyFromObject(s.pod), nil) {
			return reconcile.Result{RequeueAfter: time.Second}, nil // created, not yet cached
		}
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("reading the pod's DeferRun: %w", err)
	}
	if !r.exp.runs.satisfied(client.ObjectKeyFromObject(run), run) {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if run.Spec.PodUID != s.pod.UID {
		if v1.Finished(run) && run.DeletionTimestamp == nil {
			log.FromContext(ctx).Info("deleting the finished run of an earlier pod of this name", "deferrun", run.Name, "podUID", run.Spec.PodUID)
			return reconcile.Result{RequeueAfter: time.Second}, client.IgnoreNotFound(r.client.Delete(ctx, run, client.Preconditions{UID: &run.UID}))
		}
		return reconcile.Result{RequeueAfter: 10 * time.Second}, nil
	}
	s.run = run
	return reconcile.Result{}, nil
}

func (r *PodReconciler) loadClaims(ctx context.Context, s *podState) error {
	for _, c := range podstate.WorkClaims(s.pod) {
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.client.Get(ctx, types.NamespacedName{Namespace: s.pod.Namespace, Name: c.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading work PVC %s: %w", c.ClaimName, err)
		}
		if !r.exp.claims.satisfied(client.ObjectKeyFromObject(pvc), pvc) {
			return errRequeue
		}
		if pvc.DeletionTimestamp != nil {
			continue // released (or being deleted by someone): nothing to arm
		}
		if !ownedBy(pvc.OwnerReferences, s.pod.UID) && (s.run == nil || !HasOwner(pvc.OwnerReferences, s.run)) {
			continue // not this pod's claim (a stale PVC of an earlier pod of this name)
		}
		s.pvcs = append(s.pvcs, pvc)
	}
	return nil
}

// arm creates the pod's DeferRun with the effective policy. A pod already
// done when first seen (the controller was down) is armed the same way: the
// run side records its trigger (the pod is held by kdefer's finalizer).
func (r *PodReconciler) arm(ctx context.Context, s *podState) error {
	run, err := RunFor(ctx, r.client, s.pod)
	if err != nil {
		return err
	}
	log.FromContext(ctx).Info("creating defer run", "deferrun", run.Name, "policy", run.Spec.PolicyName, "podDone", s.class.Done,
		"stageUID", StageUID(run))
	if err := r.client.Create(ctx, run); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// The cache had not seen it yet: made by an earlier pass, or
			// by the webhook as the PVC was created (PVCArmer).
			return errRequeue
		}
		return fmt.Errorf("creating defer run %s: %w", run.Name, err)
	}
	r.exp.runs.expect(run)
	Metrics.Writes.WithLabelValues("arm").Inc()
	s.run = run
	return nil
}

// RunFor returns the DeferRun that arms pod, with its effective policy (the
// DeferPolicy that applies to it, read through c, and its annotations). A
// policy that cannot be resolved is recorded in the run, which resolves it
// again later.
func RunFor(ctx context.Context, c client.Reader, pod *corev1.Pod) (*v1.DeferRun, error) {
	policyName, eff, err := effectivePolicy(ctx, c, pod.Namespace, pod.Annotations[v1.AnnotationPolicy], pod.Annotations)
	configErr := ""
	var problem *policyProblem
	switch {
	case errors.As(err, &problem):
		configErr = problem.Error()
	case err != nil:
		return nil, err
	}
	return BuildRun(pod, policyName, eff, configErr), nil
}

// policyProblem is what is wrong with the policy a run is armed with (a
// DeferPolicy that does not exist, an annotation that does not parse, a
// DeferPolicy stored before admission refused what it holds). Only the user
// can fix it, so the run records it and waits, where an API error is
// retried. reason is the ConfigError condition's.
type policyProblem struct{ msg, reason string }

func (p *policyProblem) Error() string { return p.msg }

// effectivePolicy computes the policy for an object in namespace ns that
// names DeferPolicy named ("" for none) from the DeferPolicy that applies
// to it (resolve.Policy, read through c: the named one, the namespace's
// default, or the ClusterDeferPolicy admission recorded in
// kdefer.io/cluster-policy) and its kdefer annotations, and returns the applied
// policy's name too (named when it cannot be resolved). A *policyProblem
// says what the user must fix; the spec that comes with it is what could
// be computed (from the annotations alone when no policy could be
// resolved). Any other error is the API's.
func effectivePolicy(ctx context.Context, c client.Reader, ns, named string, ann map[string]string) (string, v1.DeferPolicySpec, error) {
	name := named
	var problem *policyProblem
	applied, err := resolve.Policy(ctx, resolve.Cluster{Reader: c, Cache: c}, resolve.Subject{
		Namespace: ns, Named: named, Armed: true, Recorded: ann[v1.AnnotationClusterPolicy]})
	var annErr *v1.AnnotationError
	var ambiguous *resolve.AmbiguousDefaultError
	switch {
	case apierrors.IsNotFound(err):
		problem = &policyProblem{policyNotFound(ns, named), v1.ReasonPolicyNotFound}
	case errors.As(err, &annErr):
		problem = &policyProblem{err.Error(), v1.ReasonBadAnnotation}
	case errors.As(err, &ambiguous):
		problem = &policyProblem{err.Error(), v1.ReasonInvalidPolicy}
	case err != nil:
		return name, v1.DeferPolicySpec{}, err
	default:
		name = applied.Name()
	}
	spec := applied.Spec()
	eff, err := render.EffectivePolicy(spec, ann)
	if err != nil && problem == nil {
		reason := v1.ReasonBadAnnotation
		if spec != nil {
			reason = v1.ReasonInvalidPolicy
		}
		problem = &policyProblem{err.Error(), reason}
	}
	if problem != nil {
		return name, eff, problem
	}
	return name, eff, nil
}

// adopt makes the run a second owner of every work PVC; see AdoptedOwners.
func (r *PodReconciler) adopt(ctx context.Context, s *podState) error {
	for _, pvc := range s.pvcs {
		owners, changed := AdoptedOwners(pvc, s.run, s.pod.DeletionTimestamp != nil)
		if !changed {
			continue
		}
		log.FromContext(ctx).Info("adopting work volume", "pvc", pvc.Name, "podDeleting", s.pod.DeletionTimestamp != nil)
		if err := patch(ctx, r.client, pvc, func(pvc *corev1.PersistentVolumeClaim) { pvc.OwnerReferences = owners }); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("adopting work volume %s: %w", pvc.Name, err)
		}
		r.exp.claims.expect(pvc)
		Metrics.Writes.WithLabelValues("adopt").Inc()
	}
	return nil
}

// propagateSkip marks an unfinished run skipped when the pod or its Job
// asks for it (`kdefer skip`) after the run was armed.
func (r *PodReconciler) propagateSkip(ctx context.Context, s *podState) error {
	run := s.run
	if !skipRequested(s.pod, s.job) || v1.Finished(run) || run.Annotations[v1.AnnotationSkip] == "true" {
		return nil
	}
	log.FromContext(ctx).Info("skipping defer run on request")
	if err := patch(ctx, r.client, run, func(run *v1.DeferRun) { setAnnotation(run, v1.AnnotationSkip, "true") }); err != nil {
		return fmt.Errorf("marking the run skipped: %w", err)
	}
	r.exp.runs.expect(run)
	return nil
}

// nodeLost reports whether the pod's node has been NotReady for the run's
// nodeLostTimeout (its kubelet will never report the containers' end), and
// otherwise how long to wait before looking again while it is NotReady. A
// deleted node makes PodGC fail the pod: trigger PodGC.
func nodeLost(ctx context.Context, c client.Client, now time.Time, pod *corev1.Pod, run *v1.DeferRun) (bool, time.Duration, error) {
	if pod.Spec.NodeName == "" {
		return false, 0, nil
	}
	node := &corev1.Node{}
	if err := c.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
		return false, 0, client.IgnoreNotFound(err)
	}
	var since time.Time
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
			since = cond.LastTransitionTime.Time
		}
	}
	if since.IsZero() {
		return false, 0, nil
	}
	timeout := v1.DefaultNodeLostTimeout
	if run.Spec.Policy.NodeLostTimeout != nil {
		timeout = run.Spec.Policy.NodeLostTimeout.Duration
	}
	if left := since.Add(timeout).Sub(now); left > 0 {
		return false, left, nil
	}
	return true, 0, nil
}

// releasePod removes kdefer's finalizer from the pod.
func (r *PodReconciler) releasePod(ctx context.Context, pod *corev1.Pod) error {
	if !controllerutil.ContainsFinalizer(pod, v1.PodFinalizer) {
		return nil
	}
	log.FromContext(ctx).Info("removing pod finalizer")
	if err := patch(ctx, r.client, pod, func(pod *corev1.Pod) { controllerutil.RemoveFinalizer(pod, v1.PodFinalizer) }); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("removing the pod finalizer: %w", err)
	}
	r.exp.pods.expect(pod)
	Metrics.Writes.WithLabelValues("release-pod").Inc()
	return nil
}

func skipRequested(pod *corev1.Pod, job *batchv1.Job) bool {
	return pod.Annotations[v1.AnnotationSkip] == "true" || (job != nil && job.Annotations[v1.AnnotationSkip] == "true")
}

func setAnnotation(obj metav1.Object, k, v string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	obj.SetAnnotations(a)
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}

func policyNotFound(ns, name string) string {
	return fmt.Sprintf("DeferPolicy %s/%s named by annotation %s does not exist: create it, or fix the annotation on the Job", ns, name, v1.AnnotationPolicy)
}
