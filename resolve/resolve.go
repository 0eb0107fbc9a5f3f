// Package resolve decides which DeferPolicy applies to an opted-in Job or
// pod: the one its kdefer.io/policy annotation names, else its namespace's
// default (spec.namespaceDefault). Policy is the one place that decides it:
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

// Source reads the DeferPolicies Policy chooses from.
type Source interface {
	// Get returns the DeferPolicy name in namespace ns; a missing one is
	// an error apierrors.IsNotFound recognises.
	Get(ctx context.Context, ns, name string) (*v1.DeferPolicy, error)
	// Defaults returns the DeferPolicies of namespace ns that set
	// spec.namespaceDefault.
	Defaults(ctx context.Context, ns string) ([]v1.DeferPolicy, error)
}

// Applied is the DeferPolicy that applies to a Job or pod.
type Applied struct {
	// Policy is nil when none applies: the annotations alone configure it.
	Policy *v1.DeferPolicy
	// ByDefault: the object names no policy; its namespace's default
	// applies.
	ByDefault bool
}

// Name is the applied policy's name ("" for none).
func (a Applied) Name() string {
	if a.Policy == nil {
		return ""
	}
	return a.Policy.Name
}

// Spec is the applied policy's spec (nil for none), what render and
// render.EffectivePolicy take.
func (a Applied) Spec() *v1.DeferPolicySpec {
	if a.Policy == nil {
		return nil
	}
	return &a.Policy.Spec
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

// Policy returns the DeferPolicy that applies to an object of namespace ns
// that names policy named ("" for none) with kdefer.io/policy:
//
//   - the named one, if it names one (an error apierrors.IsNotFound
//     recognises if it does not exist);
//   - else the namespace's default, if it has one;
//   - else none.
//
// A default that locks fields (spec.locked) is mandatory: naming another
// policy is a *v1.AnnotationError naming both policies and the fix. Whether
// the object's annotations override a locked field is
// render.EffectivePolicy's check, on the policy returned here.
func Policy(ctx context.Context, src Source, ns, named string) (Applied, error) {
	defs, err := src.Defaults(ctx, ns)
	if err != nil {
		return Applied{}, fmt.Errorf("listing the default DeferPolicies of namespace %s: %w", ns, err)
	}
	var def *v1.DeferPolicy
	switch len(defs) {
	case 0:
	case 1:
		def = &defs[0]
	default:
		names := make([]string, len(defs))
		for i := range defs {
			names[i] = defs[i].Name
		}
		slices.Sort(names)
		return Applied{}, &AmbiguousDefaultError{Namespace: ns, Names: names}
	}
	if named == "" {
		return Applied{Policy: def, ByDefault: def != nil}, nil
	}
	if def != nil && named != def.Name && len(def.Spec.Locked) > 0 {
		locked := make([]string, len(def.Spec.Locked))
		for i, f := range def.Spec.Locked {
			locked[i] = string(f)
		}
		return Applied{}, &v1.AnnotationError{Key: v1.AnnotationPolicy, Value: named,
			Problem: fmt.Sprintf("names DeferPolicy %q, but DeferPolicy %q is the default of namespace %s (spec.namespaceDefault) and locks %s (spec.locked), so every opted-in Job and pod here uses it",
				named, def.Name, ns, strings.Join(locked, ", ")),
			Fix: fmt.Sprintf("remove the annotation (or set it to %q) and use the default's %s; for another destination, ask the owner of DeferPolicy %q",
				def.Name, strings.Join(locked, ", "), def.Name)}
	}
	p, err := src.Get(ctx, ns, named)
	if err != nil {
		return Applied{}, fmt.Errorf("reading DeferPolicy %s/%s: %w", ns, named, err)
	}
	return Applied{Policy: p}, nil
}
