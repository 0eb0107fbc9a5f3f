// Package scheme builds the one runtime.Scheme every kdefer client uses: the
// controller's manager, the kdefer CLI, envtest and the benchmarks. It holds
// client-go's built-in types and kdefer's API (api/v1alpha1).
//
// It sits in the api layer, just above api/v1alpha1: it registers types and
// must not import anything that talks to a cluster, nor any kdefer package
// but api/v1alpha1, so that the CLI can use it without linking the
// controller.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// New returns a new scheme with client-go's types and kdefer's. It panics if
// a type cannot be registered, which is a programming error (two types
// claiming one kind), not a runtime condition.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
