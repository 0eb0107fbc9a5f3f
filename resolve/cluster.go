package resolve

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// IndexNamespaceDefault is the field DeferPolicies are listed by to find a
// namespace's default: the manager's cache indexes it (SetupIndex), and
// the CRD declares it a selectable field, so a client without a cache (the
// tests', kubectl's --field-selector) lists by it the same way.
const IndexNamespaceDefault = "spec.namespaceDefault"

// NamespaceDefaultIndex is the index function of IndexNamespaceDefault:
// "true" for a default, nothing otherwise.
func NamespaceDefaultIndex(o client.Object) []string {
	if p, ok := o.(*v1.DeferPolicy); ok && p.Spec.NamespaceDefault {
		return []string{"true"}
	}
	return nil
}

// SetupIndex registers IndexNamespaceDefault; call it before the manager
// starts.
func SetupIndex(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &v1.DeferPolicy{}, IndexNamespaceDefault, NamespaceDefaultIndex)
}

// Cluster is the Source of a cluster.
type Cluster struct {
	// Reader reads a named DeferPolicy and lists a namespace's defaults by
	// IndexNamespaceDefault. The webhooks give the API reader, so a policy
	// created just before its Job is seen, and a locked default binds a
	// Job created a moment after it: a cache can lag behind it (seen under
	// load), which would let that Job step around the lock.
	Reader client.Reader
	// Cache reads the ClusterDeferPolicies and the namespaces' labels: the
	// manager's client, so a lookup on every admission costs no API
	// request. A ClusterDeferPolicy reaches a namespace's Jobs through the
	// label the controller sets once it has seen the policy, so it takes
	// effect moments after its creation whichever way it is read here.
	Cache client.Reader
}

// Get implements Source.
func (c Cluster) Get(ctx context.Context, ns, name string) (*v1.DeferPolicy, error) {
	p := &v1.DeferPolicy{}
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		return nil, err
	}
	return p, nil
}

// Defaults implements Source.
func (c Cluster) Defaults(ctx context.Context, ns string) ([]v1.DeferPolicy, error) {
	var list v1.DeferPolicyList
	if err := c.Reader.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{IndexNamespaceDefault: "true"}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// ClusterPolicies implements Source, from the cache (the controller
// watches ClusterDeferPolicies).
func (c Cluster) ClusterPolicies(ctx context.Context) ([]v1.ClusterDeferPolicy, error) {
	var list v1.ClusterDeferPolicyList
	if err := c.Cache.List(ctx, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// NamespaceLabels implements Source, from the cache; a namespace that does
// not exist has none.
func (c Cluster) NamespaceLabels(ctx context.Context, ns string) (map[string]string, error) {
	n := &corev1.Namespace{}
	if err := c.Cache.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return n.Labels, nil
}
