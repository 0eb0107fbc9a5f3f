package resolve

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// AmbiguousClusterError says more than one ClusterDeferPolicy selects a
// Job. It is refused (and a pod of it not armed) until one is left: their
// order would be a guess, and could pick the one without locks, or hand
// one platform's credentials to another's Jobs.
type AmbiguousClusterError struct {
	Namespace string
	Names     []string
}

func (e *AmbiguousClusterError) Error() string {
	return fmt.Sprintf("%d ClusterDeferPolicies select this Job of namespace %s: %s; fix: narrow their spec.namespaceSelector or spec.jobSelector so that at most one selects a Job (kubectl get clusterdeferpolicies), or opt the Job out with annotation %s: \"true\" if none is locked",
		len(e.Names), e.Namespace, strings.Join(e.Names, ", "), v1.AnnotationSkip)
}

// SelectsNamespace reports whether p's namespaceSelector selects a
// namespace with labels nsLabels; an invalid selector selects none.
func SelectsNamespace(p *v1.ClusterDeferPolicy, nsLabels map[string]string) bool {
	return selects(&p.Spec.NamespaceSelector, nsLabels)
}

// selectsJob reports whether p's jobSelector (none: every Job) selects a
// Job with labels jobLabels.
func selectsJob(p *v1.ClusterDeferPolicy, jobLabels map[string]string) bool {
	return p.Spec.JobSelector == nil || selects(p.Spec.JobSelector, jobLabels)
}

func selects(ls *metav1.LabelSelector, set map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(set))
}

// selecting returns the ClusterDeferPolicy that selects s (nil for none):
// the one its namespace's labels and its own labels select, or, for a pod
// the controller arms, the one admission recorded while it still selects
// the namespace.
func selecting(ctx context.Context, src Source, s Subject) (*v1.ClusterDeferPolicy, error) {
	if s.Armed && s.Recorded == "" {
		return nil, nil
	}
	all, err := src.ClusterPolicies(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the ClusterDeferPolicies: %w", err)
	}
	nsLabels, err := src.NamespaceLabels(ctx, s.Namespace)
	if err != nil {
		return nil, fmt.Errorf("reading the labels of namespace %s: %w", s.Namespace, err)
	}
	if s.Armed {
		for i := range all {
			if all[i].Name == s.Recorded && SelectsNamespace(&all[i], nsLabels) {
				return &all[i], nil
			}
		}
		return nil, &v1.AnnotationError{Key: v1.AnnotationClusterPolicy, Value: s.Recorded,
			Problem: fmt.Sprintf("admission armed the pod with ClusterDeferPolicy %q, which no longer exists or no longer selects namespace %s", s.Recorded, s.Namespace),
			Fix:     fmt.Sprintf("restore ClusterDeferPolicy %q (or its namespaceSelector), or recreate the Job so that admission chooses again", s.Recorded)}
	}
	var found []*v1.ClusterDeferPolicy
	for i := range all {
		if SelectsNamespace(&all[i], nsLabels) && selectsJob(&all[i], s.Labels) {
			found = append(found, &all[i])
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, p := range found {
		names[i] = p.Name
	}
	slices.Sort(names)
	return nil, &AmbiguousClusterError{Namespace: s.Namespace, Names: names}
}

// PlatformLabel is the value of v1.LabelPlatformPolicy a namespace with
// labels nsLabels should carry among policies: the name of the one that
// selects it, "" when several do, and select false when none does (no
// label). The controller and the namespace webhook both set it.
func PlatformLabel(policies []v1.ClusterDeferPolicy, nsLabels map[string]string) (value string, selected bool) {
	var names []string
	for i := range policies {
		if policies[i].DeletionTimestamp == nil && SelectsNamespace(&policies[i], nsLabels) {
			names = append(names, policies[i].Name)
		}
	}
	if len(names) == 1 {
		return names[0], true
	}
	return "", len(names) > 0
}
