// Package resolve decides which DeferPolicy applies to a Job or pod: the
// one its kdefer.io/policy annotation names, its namespace's default
// (spec.namespaceDefault), or the ClusterDeferPolicy that selects it, locks
// first (see Policy); and whether a Job without kdefer's label is armed at
// all (a ClusterDeferPolicy selects it). Policy is the one place that
// decides it:
// the webhooks at admission, the controller when it arms a pod, and
// `kdefer render` and `kdefer lint` offline call it, each with a Source of
// its own (the cluster's, or the input files'). It sits beside render, above
// api only.
package resolve

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// Source reads the policies Policy chooses from.
type Source interface {
	// Get returns the DeferPolicy name in namespace ns; a missing one is
	// an error apierrors.IsNotFound recognises.
	Get(ctx context.Context, ns, name string) (*v1.DeferPolicy, error)
	// Defaults returns the DeferPolicies of namespace ns that set
	// spec.namespaceDefault.
	Defaults(ctx context.Context, ns string) ([]v1.DeferPolicy, error)
	// ClusterPolicies returns every ClusterDeferPolicy.
	ClusterPolicies(ctx context.Context) ([]v1.ClusterDeferPolicy, error)
	// NamespaceLabels returns the labels of namespace ns (none for one it
	// does not know).
	NamespaceLabels(ctx context.Context, ns string) (map[string]string, error)
}

// Subject is the Job or pod a policy is decided for.
type Subject struct {
	// Namespace of the object.
	Namespace string
	// Named is the DeferPolicy it names with kdefer.io/policy ("").
	Named string
	// Labels are the Job's (or bare pod's) labels, which a
	// ClusterDeferPolicy's jobSelector selects.
	Labels map[string]string
	// Skip: it carries kdefer.io/skip: "true".
	Skip bool
	// Recorded is the ClusterDeferPolicy admission chose for it
	// (kdefer.io/cluster-policy on a rendered pod), when the controller
	// arms the pod: it is the only one considered, its jobSelector is not
	// evaluated again (the pod's labels are not its Job's), and it applies
	// only while its namespaceSelector still selects the namespace.
	Recorded string
	// Armed says the controller arms a rendered pod: a ClusterDeferPolicy
	// applies only if Recorded names it.
	Armed bool
}

// Applied is the policy that applies to a Job or pod.
type Applied struct {
	// Policy is nil when no DeferPolicy applies: the annotations alone, or
	// Cluster, configure it.
	Policy *v1.DeferPolicy
	// ByDefault: the object names no policy; its namespace's default
	// applies.
	ByDefault bool
	// Cluster is the ClusterDeferPolicy that applies (Policy is nil then).
	Cluster *v1.ClusterDeferPolicy
	// Selected is the ClusterDeferPolicy that selects the object, whether
	// it applies or a DeferPolicy of the namespace does: a Job without
	// kdefer's label is armed only when one does ("" for none, and for a
	// Job that opts out with kdefer.io/skip).
	Selected string
}

// Name is the applied policy's name ("" for none).
func (a Applied) Name() string {
	switch {
	case a.Policy != nil:
		return a.Policy.Name
	case a.Cluster != nil:
		return a.Cluster.Name
	}
	return ""
}

// ClusterName is the applied ClusterDeferPolicy's name ("" for none), what
// kdefer.io/cluster-policy records.
func (a Applied) ClusterName() string {
	if a.Cluster == nil {
		return ""
	}
	return a.Cluster.Name
}

// Spec is the applied policy's spec (nil for none), what render and
// render.EffectivePolicy take.
func (a Applied) Spec() *v1.DeferPolicySpec {
	switch {
	case a.Policy != nil:
		return &a.Policy.Spec
	case a.Cluster != nil:
		return &a.Cluster.Spec.DeferPolicySpec
	}
	return nil
}

// AmbiguousDefaultError says a namespace has more than one default policy
// (two made at once, past the webhook's check, or while it was down).
// Nothing in the namespace is admitted or armed until one is left, as a
// guess could pick the one without locks.
type AmbiguousDefaultError struct {
	Namespace string
	Names     []string
}

func (e *AmbiguousDefaultError) Error() string {
	return fmt.Sprintf("namespace %s has %d default DeferPolicies (spec.namespaceDefault): %s; fix: keep one, e.g. kubectl -n %s patch deferpolicy %s --type merge -p '{\"spec\":{\"namespaceDefault\":false}}'",
		e.Namespace, len(e.Names), strings.Join(e.Names, ", "), e.Namespace, e.Names[len(e.Names)-1])
}

// Policy returns the policy that applies to subject s, locks first, then
// the most specific:
//
//  1. its namespace's default, if it locks fields (spec.locked): the
//     namespace's mandatory policy wins inside it, and naming another
//     DeferPolicy is a *v1.AnnotationError naming both and the fix;
//  2. the ClusterDeferPolicy that selects it, if that one locks fields:
//     naming a DeferPolicy, or kdefer.io/skip, is a *v1.AnnotationError;
//  3. the DeferPolicy it names (an error apierrors.IsNotFound recognises
//     if it does not exist);
//  4. its namespace's default;
//  5. the ClusterDeferPolicy that selects it;
//  6. none.
//
// Two defaults of a namespace, or two ClusterDeferPolicies that select the
// same object, are an *AmbiguousDefaultError or *AmbiguousClusterError: a
// guess could pick the one without locks. Whether the object's annotations
// override a locked field is render.EffectivePolicy's check, on the policy
// returned here.
func Policy(ctx context.Context, src Source, s Subject) (Applied, error) {
	def, err := namespaceDefault(ctx, src, s.Namespace)
	if err != nil {
		return Applied{}, err
	}
	if def != nil && len(def.Spec.Locked) > 0 {
		if s.Named != "" && s.Named != def.Name {
			return Applied{}, &v1.AnnotationError{Key: v1.AnnotationPolicy, Value: s.Named,
				Problem: fmt.Sprintf("names DeferPolicy %q, but DeferPolicy %q is the default of namespace %s (spec.namespaceDefault) and locks %s (spec.locked), so every opted-in Job and pod here uses it",
					s.Named, def.Name, s.Namespace, lockedList(def.Spec.Locked)),
				Fix: fmt.Sprintf("remove the annotation (or set it to %q) and use the default's %s; for another destination, ask the owner of DeferPolicy %q",
					def.Name, lockedList(def.Spec.Locked), def.Name)}
		}
		// The platform's policy may still select the Job: it is armed,
		// with the namespace's policy.
		cl, err := selecting(ctx, src, s)
		if err != nil {
			return Applied{}, err
		}
		return Applied{Policy: def, ByDefault: s.Named == "", Selected: clusterName(cl)}, nil
	}
	cl, err := selecting(ctx, src, s)
	if err != nil {
		return Applied{}, err
	}
	if cl != nil && len(cl.Spec.Locked) > 0 {
		if err := lockedIn(cl, s); err != nil {
			return Applied{}, err
		}
		return Applied{Cluster: cl, Selected: cl.Name}, nil
	}
	if s.Skip && !s.Armed {
		// Opting out of an unlocked platform policy; a Job with
		// kdefer's label is armed still, its runs skipped.
		cl = nil
	}
	if s.Named != "" {
		p, err := src.Get(ctx, s.Namespace, s.Named)
		if err != nil {
			return Applied{}, fmt.Errorf("reading DeferPolicy %s/%s: %w", s.Namespace, s.Named, err)
		}
		return Applied{Policy: p, Selected: clusterName(cl)}, nil
	}
	if def != nil {
		return Applied{Policy: def, ByDefault: true, Selected: clusterName(cl)}, nil
	}
	if cl != nil {
		return Applied{Cluster: cl, Selected: cl.Name}, nil
	}
	return Applied{}, nil
}

// namespaceDefault returns the default DeferPolicy of namespace ns (nil
// for none).
func namespaceDefault(ctx context.Context, src Source, ns string) (*v1.DeferPolicy, error) {
	defs, err := src.Defaults(ctx, ns)
	if err != nil {
		return nil, fmt.Errorf("listing the default DeferPolicies of namespace %s: %w", ns, err)
	}
	switch len(defs) {
	case 0:
		return nil, nil
	case 1:
		return &defs[0], nil
	}
	names := make([]string, len(defs))
	for i := range defs {
		names[i] = defs[i].Name
	}
	slices.Sort(names)
	return nil, &AmbiguousDefaultError{Namespace: ns, Names: names}
}

// lockedIn refuses what a subject does to step out of a locked
// ClusterDeferPolicy cl that selects it.
func lockedIn(cl *v1.ClusterDeferPolicy, s Subject) error {
	locks := lockedList(cl.Spec.Locked)
	if s.Named != "" {
		return &v1.AnnotationError{Key: v1.AnnotationPolicy, Value: s.Named,
			Problem: fmt.Sprintf("names DeferPolicy %q, but ClusterDeferPolicy %q selects namespace %s and locks %s (spec.locked), so every Job it selects uses it",
				s.Named, cl.Name, s.Namespace, locks),
			Fix: fmt.Sprintf("remove the annotation and use ClusterDeferPolicy %q's %s; for another destination, ask its owner (the platform team)", cl.Name, locks)}
	}
	if s.Skip && !s.Armed {
		return &v1.AnnotationError{Key: v1.AnnotationSkip, Value: "true",
			Problem: fmt.Sprintf("opts out, but ClusterDeferPolicy %q selects namespace %s and locks %s (spec.locked), so every Job it selects keeps its outputs",
				cl.Name, s.Namespace, locks),
			Fix: fmt.Sprintf("remove the annotation; to be left out, ask the owner of ClusterDeferPolicy %q (the platform team) to narrow its namespaceSelector or jobSelector", cl.Name)}
	}
	return nil
}

func lockedList(locked []v1.LockedField) string {
	out := make([]string, len(locked))
	for i, f := range locked {
		out[i] = string(f)
	}
	return strings.Join(out, ", ")
}

func clusterName(cl *v1.ClusterDeferPolicy) string {
	if cl == nil {
		return ""
	}
	return cl.Name
}
