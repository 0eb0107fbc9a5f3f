// Package v1alpha1 holds kdefer's API: the DeferPolicy and DeferRun custom
// resources, the labels, annotations and finalizers kdefer puts on Jobs, pods
// and volumes, and the contract between the controller and the stage binary.
// It also holds what every side shares about a run: condition types and
// their reasons, Finished and StateOf, DeferPodName, the release annotation.
//
// It is the bottom layer: it must not import any other kdefer package but the
// Kubernetes-free leaves stagecontract and internal/version, nor anything
// that talks to a cluster (no clients, no controller-runtime: its scheme
// builder is apimachinery's, as in k8s.io/api).
//
// +kubebuilder:object:generate=true
// +groupName=kdefer.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of kdefer's custom resources.
	GroupVersion = schema.GroupVersion{Group: "kdefer.io", Version: "v1alpha1"}

	// SchemeBuilder registers kdefer's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds kdefer's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers every kdefer kind, and the meta/v1 types (options,
// WatchEvent) a client needs for the group version.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&DeferPolicy{}, &DeferPolicyList{},
		&ClusterDeferPolicy{}, &ClusterDeferPolicyList{},
		&DeferRun{}, &DeferRunList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
