// Package v1alpha1 holds kdefer's API: the DeferPolicy and DeferRun custom
// resources, the labels, annotations and finalizers kdefer puts on Jobs, pods
// and volumes, and the contract between the controller and the stage binary.
//
// +kubebuilder:object:generate=true
// +groupName=kdefer.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of kdefer's custom resources.
	GroupVersion = schema.GroupVersion{Group: "kdefer.io", Version: "v1alpha1"}

	// SchemeBuilder registers kdefer's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds kdefer's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
