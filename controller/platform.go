package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;delete

// PlatformOptions configure what kdefer does for ClusterDeferPolicies.
type PlatformOptions struct {
	// Namespace is kdefer's own: where a ClusterDeferPolicy's credentials
	// Secret is, and a namespace no ClusterDeferPolicy selects.
	Namespace string
	// Served are the namespaces of a namespaced install (empty: every
	// one); no other is labelled or gets a copy of credentials.
	Served []string
}

// PlatformReconciler keeps, for each namespace, what ClusterDeferPolicies
// need there: the label LabelPlatformPolicy, on which a webhook selects
// the namespaces whose plain Jobs reach kdefer, and the copy of each
// selecting policy's credentials Secret (ClusterCredentialsName), owned by
// the policy so the garbage collector removes it with the policy. Its
// requests are namespaces; a policy's change enqueues every namespace.
type PlatformReconciler struct {
	client client.Client
	// reader reads Secrets: they are not cached (kdefer never lists or
	// watches them).
	reader client.Reader
	opts   PlatformOptions
}

// NewPlatformReconciler returns the reconciler.
func NewPlatformReconciler(c client.Client, reader client.Reader, opts PlatformOptions) *PlatformReconciler {
	return &PlatformReconciler{client: c, reader: reader, opts: opts}
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

// Reconcile labels namespace req.Name and keeps its credentials copies.
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
	if err := r.label(ctx, ns, list.Items); err != nil {
		return reconcile.Result{}, err
	}
	for i := range list.Items {
		p := &list.Items[i]
		var err error
		if p.DeletionTimestamp == nil && resolve.SelectsNamespace(p, ns.Labels) && p.Spec.Credentials != nil {
			err = r.copyCredentials(ctx, ns.Name, p)
		} else {
			err = r.dropCredentials(ctx, ns.Name, p.Name)
		}
		if err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// serves reports whether the platform's policies may reach namespace ns:
// never kdefer's own (where the policies' Secrets are).
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

// copyCredentials keeps in namespace ns a copy of p's credentials Secret
// (in kdefer's namespace), labelled and owned by p. A Secret of that name
// that is not kdefer's copy is left alone (and logged): it is the
// namespace's, and the stage steps there use it.
func (r *PlatformReconciler) copyCredentials(ctx context.Context, ns string, p *v1.ClusterDeferPolicy) error {
	src := &corev1.Secret{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: r.opts.Namespace, Name: p.Spec.Credentials.Name}, src); err != nil {
		if apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("waiting for the credentials of a cluster policy", "policy", p.Name, "secret", r.opts.Namespace+"/"+p.Spec.Credentials.Name)
			return nil
		}
		return fmt.Errorf("reading Secret %s/%s of ClusterDeferPolicy %s: %w", r.opts.Namespace, p.Spec.Credentials.Name, p.Name, err)
	}
	name := v1.ClusterCredentialsName(p.Name)
	cur := &corev1.Secret{}
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cur)
	switch {
	case apierrors.IsNotFound(err):
		cp := credentialsCopy(src, ns, p)
		log.FromContext(ctx).Info("copying the credentials of a cluster policy", "policy", p.Name, "secret", ns+"/"+name)
		if err := r.client.Create(ctx, cp); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("copying Secret %s/%s of ClusterDeferPolicy %s to %s/%s: %w", r.opts.Namespace, src.Name, p.Name, ns, name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s/%s: %w", ns, name, err)
	case cur.Labels[v1.LabelCredentialsOf] != p.Name:
		log.FromContext(ctx).Info("leaving a Secret that is not kdefer's copy", "policy", p.Name, "secret", ns+"/"+name)
		return nil
	case maps.EqualFunc(cur.Data, src.Data, func(a, b []byte) bool { return string(a) == string(b) }) && cur.Type == src.Type:
		return nil
	}
	cur.Data = src.Data
	log.FromContext(ctx).Info("updating the credentials copy of a cluster policy", "policy", p.Name, "secret", ns+"/"+name)
	if err := r.client.Update(ctx, cur); err != nil {
		return fmt.Errorf("updating Secret %s/%s: %w", ns, name, err)
	}
	return nil
}

// credentialsCopy is the copy of src in namespace ns for policy p.
func credentialsCopy(src *corev1.Secret, ns string, p *v1.ClusterDeferPolicy) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: v1.ClusterCredentialsName(p.Name), Namespace: ns,
			Labels: map[string]string{v1.LabelCredentialsOf: p.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1.GroupVersion.String(), Kind: "ClusterDeferPolicy",
				Name: p.Name, UID: p.UID, BlockOwnerDeletion: ptr.To(false)}},
		},
		Type: src.Type,
		Data: src.Data,
	}
}

// dropCredentials deletes kdefer's copy of policy's credentials in ns, if
// there is one: the policy no longer selects ns, or has no credentials.
func (r *PlatformReconciler) dropCredentials(ctx context.Context, ns, policy string) error {
	cur := &corev1.Secret{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: v1.ClusterCredentialsName(policy)}, cur); err != nil {
		return client.IgnoreNotFound(err)
	}
	if cur.Labels[v1.LabelCredentialsOf] != policy {
		return nil
	}
	log.FromContext(ctx).Info("deleting the credentials copy of a cluster policy", "policy", policy, "secret", ns+"/"+cur.Name)
	if err := r.client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Secret %s/%s: %w", ns, cur.Name, err)
	}
	return nil
}
