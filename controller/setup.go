package controller

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/podstate"
	"github.com/kdefer/kdefer/resolve"
)

// Field indexes on DeferRuns.
const (
	IndexRunJob    = "spec.jobName"
	IndexRunPolicy = "spec.policyName"
	// IndexRunLostNode: the node of a run that failed with NodeLost, which
	// resumes when the node is Ready again.
	IndexRunLostNode = "status.lostNodeName"
)

// Options configure the controllers.
type Options struct {
	DeferPod DeferPodOptions
	// Clock for everything timed (a fake one in tests).
	Clock clock.Clock
	// Workers per controller.
	Workers int
	// NoPrePull turns pre-pulling the stage image off for every policy.
	NoPrePull bool
	// Platform configures the namespace labels kdefer keeps for
	// ClusterDeferPolicies.
	Platform PlatformOptions
}

// SetupIndexes registers the field indexes, the webhooks'
// (resolve.IndexNamespaceDefault) too; call it before the manager starts.
func SetupIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := resolve.SetupIndex(ctx, idx); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1.DeferRun{}, IndexRunJob, func(o client.Object) []string {
		if j := o.(*v1.DeferRun).Spec.JobName; j != "" {
			return []string{j}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1.DeferRun{}, IndexRunPolicy, func(o client.Object) []string {
		if p := o.(*v1.DeferRun).Spec.PolicyName; p != "" {
			return []string{p}
		}
		return nil
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &v1.DeferRun{}, IndexRunLostNode, lostNode)
}

// lostNode indexes a run that failed with NodeLost by its node.
func lostNode(o client.Object) []string {
	run := o.(*v1.DeferRun)
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed); c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1.ReasonNodeLost && run.Status.NodeName != "" {
		return []string{run.Status.NodeName}
	}
	return nil
}

// SetupWithManager registers the indexes and both controllers.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Workers <= 0 {
		opts.Workers = 32
	}
	if err := SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("registering the field indexes: %w", err)
	}
	managed := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[v1.LabelManaged] == "true" })
	sameName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
	})
	c := mgr.GetClient()
	exp := newOwnWrites(opts.Clock.Now)
	podRec := NewPodReconciler(c, opts.Clock)
	podRec.exp = exp
	if !opts.NoPrePull {
		podRec.prePullImage, podRec.prePullPolicy = opts.DeferPod.StageImage, opts.DeferPod.ImagePullPolicy
	}
	runRec := NewRunReconciler(c, mgr.GetAPIReader(), mgr.GetEventRecorder("kdefer-controller"), opts.Clock, opts.DeferPod)
	runRec.exp = exp
	runGauges.use(c)
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("kdefer-pod").
		For(&corev1.Pod{}, builder.WithPredicates(managed)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(pvcToPod)).
		Watches(&v1.DeferRun{}, sameName).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(jobToRuns(c))).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Workers}).
		Complete(podRec); err != nil {
		return fmt.Errorf("setting up the pod controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("kdefer-job").
		For(&batchv1.Job{}).
		Watches(&v1.DeferRun{}, handler.EnqueueRequestsFromMapFunc(runToJob)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Workers}).
		Complete(NewJobReconciler(c, mgr.GetAPIReader(), opts.Clock)); err != nil {
		return fmt.Errorf("setting up the Job controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("kdefer-deferrun").
		For(&v1.DeferRun{}).
		// Defer pods are owned by their work PVCs (OwnByVolumes), so they
		// are mapped to their run by annotation, not by owner.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(deferPodToRun), builder.WithPredicates(predicate.Funcs{
			// The pass that creates a defer pod asks for its bookkeeping
			// pass itself (bookkeepingDelay); status changes come as updates.
			CreateFunc: func(e ctrlevent.CreateEvent) bool { return e.IsInInitialList },
		}, predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[v1.LabelManaged] == v1.ManagedDeferPod }))).
		Watches(&corev1.Pod{}, podEnded(), builder.WithPredicates(managed)).
		Watches(&policyv1.PodDisruptionBudget{}, pdbDeleted(c)).
		Watches(&v1.DeferPolicy{}, handler.EnqueueRequestsFromMapFunc(policyToRuns(c))).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(nodeToLostRuns(c)), builder.WithPredicates(nodeBecameReady())).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Workers}).
		Complete(runRec); err != nil {
		return fmt.Errorf("setting up the DeferRun controller: %w", err)
	}
	if err := NewPlatformReconciler(c, opts.Platform).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the platform controller: %w", err)
	}
	return nil
}

// pvcToPod maps a work PVC to its pod (the ephemeral-volume controller makes
// the pod its controller) and to the run that co-owns it: same key.
func pvcToPod(_ context.Context, o client.Object) []reconcile.Request {
	var out []reconcile.Request
	for _, ref := range o.GetOwnerReferences() {
		if (ref.Kind == "Pod" && ref.APIVersion == "v1") || (ref.Kind == "DeferRun" && ref.APIVersion == v1.GroupVersion.String()) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}})
		}
	}
	return out
}

func deferPodToRun(_ context.Context, o client.Object) []reconcile.Request {
	if name := v1.DeferPodRun(o); name != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	}
	return nil
}

func runToJob(_ context.Context, o client.Object) []reconcile.Request {
	if j := o.(*v1.DeferRun).Spec.JobName; j != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: j}}}
	}
	return nil
}

// jobToRuns maps a Job to its runs.
func jobToRuns(c client.Client) handler.MapFunc {
	return runsByIndex(c, IndexRunJob, func(*v1.DeferRun) bool { return true })
}

// policyToRuns maps a DeferPolicy to the runs that wait for it (armed
// while it was missing or wrong).
func policyToRuns(c client.Client) handler.MapFunc {
	return runsByIndex(c, IndexRunPolicy, func(run *v1.DeferRun) bool {
		_, waiting := run.Annotations[annotationConfigError]
		return waiting
	})
}

// runsByIndex maps an object to the runs of its namespace whose field index
// holds its name, those keep selects.
func runsByIndex(c client.Client, index string, keep func(*v1.DeferRun) bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1.DeferRunList
		if err := c.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			if keep(&list.Items[i]) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return out
	}
}

// nodeToLostRuns maps a node to the runs that failed with NodeLost on it.
func nodeToLostRuns(c client.Client) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1.DeferRunList
		if err := c.List(ctx, &list, client.MatchingFields{IndexRunLostNode: o.GetName()}); err != nil {
			return nil
		}
		out := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		}
		return out
	}
}

// nodeBecameReady passes a node that is created Ready or turns Ready: only
// then can a run lost with it resume (the heartbeats in between are not
// worth a lookup).
func nodeBecameReady() predicate.Predicate {
	ready := func(o client.Object) bool {
		n, ok := o.(*corev1.Node)
		return ok && NodeReady(n)
	}
	return predicate.Funcs{
		CreateFunc:  func(e ctrlevent.CreateEvent) bool { return ready(e.Object) },
		UpdateFunc:  func(e ctrlevent.UpdateEvent) bool { return ready(e.ObjectNew) && !ready(e.ObjectOld) },
		DeleteFunc:  func(ctrlevent.DeleteEvent) bool { return false },
		GenericFunc: func(ctrlevent.GenericEvent) bool { return false },
	}
}

// pdbDeleted enqueues, when a namespace's defer-pod PodDisruptionBudget is
// deleted (with the run that owned it), the runs whose defer pods still
// run there, so they create it again.
func pdbDeleted(c client.Client) handler.EventHandler {
	return handler.Funcs{
		DeleteFunc: func(ctx context.Context, e ctrlevent.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object.GetName() != DeferPDBName {
				return
			}
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace(e.Object.GetNamespace()),
				client.MatchingLabels{v1.LabelManaged: v1.ManagedDeferPod}, client.UnsafeDisableDeepCopy); err != nil {
				return
			}
			for i := range pods.Items {
				p := &pods.Items[i]
				run := v1.DeferPodRun(p)
				if podTerminal(p) || p.DeletionTimestamp != nil || run == "" {
					continue
				}
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: run}})
			}
		},
	}
}

// priorityEnded is the queue priority of a run whose pod has just ended: in a
// burst, creating defer pods goes before the bookkeeping of runs already
// started (default priority 0).
const priorityEnded = 10

// podEnded enqueues a managed pod's run, ahead of other work when the pod has
// just ended.
func podEnded() handler.EventHandler {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object, high bool) {
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}
		if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok && high {
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(priorityEnded)}, req)
			return
		}
		q.Add(req)
	}
	done := func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && podstate.Classify(p, nil).Done
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e ctrlevent.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object, false)
		},
		UpdateFunc: func(_ context.Context, e ctrlevent.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.ObjectNew, done(e.ObjectNew) && !done(e.ObjectOld))
		},
		DeleteFunc: func(_ context.Context, e ctrlevent.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object, false)
		},
	}
}
