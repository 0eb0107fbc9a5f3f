package app

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// Namespaces are the namespaces a namespaced install of kdefer serves
// (kdefer-controller --namespaces, and its node-agent's): the manager's
// caches and the node agent's pod watch hold those namespaces' objects only,
// so Jobs, pods and runs elsewhere are never seen, let alone written. Empty
// is the cluster-wide install. The chart's watchNamespaces sets the flag
// and, with it, Roles in exactly those namespaces and the webhooks'
// namespaceSelector: the flag alone narrows what kdefer looks at, the RBAC
// what it could touch.
type Namespaces []string

// String is the flag's value: the namespaces, comma-separated.
func (n *Namespaces) String() string { return strings.Join(*n, ",") }

// Set adds the comma-separated namespaces of s (the flag may be repeated),
// each a namespace's name (a DNS-1123 label), once each.
func (n *Namespaces) Set(s string) error {
	for _, ns := range strings.Split(s, ",") {
		ns = strings.TrimSpace(ns)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("namespace %q: %s; give namespace names, comma-separated (--namespaces=a,b)", ns, strings.Join(errs, "; "))
		}
		if !slices.Contains(*n, ns) {
			*n = append(*n, ns)
		}
	}
	return nil
}

// scope narrows o to the namespaces (cluster-scoped objects, nodes, stay
// cluster-wide): nothing for the cluster-wide install.
func (n Namespaces) scope(o cache.Options) cache.Options {
	if len(n) == 0 {
		return o
	}
	o.DefaultNamespaces = make(map[string]cache.Config, len(n))
	for _, ns := range n {
		o.DefaultNamespaces[ns] = cache.Config{}
	}
	return o
}
