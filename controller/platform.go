package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/resolve"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kdefer.io,resources=clusterdeferpolicies,verbs=get;list;watch

// PlatformOptions configure what kdefer does for ClusterDeferPolicies.
type PlatformOptions struct {
	// Namespace is kdefer's own, which no ClusterDeferPolicy selects.
	Namespace string
	// Served are the namespaces of a namespaced install (empty: every
	// one); no other is labelled.
	Served []string
}

// PlatformReconciler keeps each namespace's label LabelPlatformPolicy, on
// which a webhook selects the namespaces whose plain Jobs reach kdefer, as
// the ClusterDeferPolicies' namespaceSelectors say (resolve.PlatformLabel).
// Its requests are namespaces; a policy's change enqueues every namespace.
// It reads and writes no Secret: a policy's credentials Secret is the
// namespace's, as a DeferPolicy's is.
type PlatformReconciler struct {
	client client.Client
	opts   PlatformOptions
}

// NewPlatformReconciler returns the reconciler.
func NewPlatformReconciler(c client.Client, opts PlatformOptions) *PlatformReconciler {
	return &PlatformReconciler{client: c, opts: opts}
}

// SetupWithManager registers the reconciler.
func (r *PlatformReconciler) SetupWithManager(mgr ctrl.Manager) error {
	allNamespaces := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list corev1.NamespaceList
		if err := r.client.List(ctx, &list); err != nil {
			log.FromContext(ctx).Error(err, "listing namespaces")
			return nil
		}
		out := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}}
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("kdefer-platform").
		For(&corev1.Namespace{}).
		Watches(&v1.ClusterDeferPolicy{}, allNamespaces).
		Complete(r)
}

// Reconcile labels namespace req.Name.
func (r *PlatformReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns := &corev1.Namespace{}
	if err := r.client.Get(ctx, req.NamespacedName, ns); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if ns.DeletionTimestamp != nil || !r.serves(ns.Name) {
		return reconcile.Result{}, nil
	}
	var list v1.ClusterDeferPolicyList
	if err := r.client.List(ctx, &list); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the ClusterDeferPolicies: %w", err)
	}
	return reconcile.Result{}, r.label(ctx, ns, list.Items)
}

// serves reports whether the platform's policies may reach namespace ns:
// never kdefer's own, whose Jobs, if any, must not wait for kdefer.
func (r *PlatformReconciler) serves(ns string) bool {
	return ns != r.opts.Namespace && (len(r.opts.Served) == 0 || slices.Contains(r.opts.Served, ns))
}

// label sets LabelPlatformPolicy on ns as resolve.PlatformLabel says.
func (r *PlatformReconciler) label(ctx context.Context, ns *corev1.Namespace, policies []v1.ClusterDeferPolicy) error {
	want, selected := resolve.PlatformLabel(policies, ns.Labels)
	if cur, has := ns.Labels[v1.LabelPlatformPolicy]; has == selected && cur == want {
		return nil
	}
	log.FromContext(ctx).Info("labelling namespace for the platform's policies", "namespace", ns.Name, "value", want, "selected", selected)
	err := patch(ctx, r.client, ns, func(ns *corev1.Namespace) {
		if !selected {
			delete(ns.Labels, v1.LabelPlatformPolicy)
			return
		}
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[v1.LabelPlatformPolicy] = want
	})
	if err != nil {
		return fmt.Errorf("labelling namespace %s: %w", ns.Name, err)
	}
	return nil
}
