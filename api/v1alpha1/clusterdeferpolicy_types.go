package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterDeferPolicySpec is a platform's DeferPolicy: it arms every Job of
// the namespaces it selects, with no kdefer.io label or annotation on the
// Job. Its policy fields are a DeferPolicy's, but namespaceDefault, which
// does not apply (namespaceSelector says where it applies). credentials
// names a Secret in each selected namespace, as a DeferPolicy's does:
// kdefer never reads or copies Secrets (docs/security.md).
// +kubebuilder:validation:XValidation:rule="!has(self.namespaceDefault) || !self.namespaceDefault",message="spec.namespaceDefault is a DeferPolicy's field: a ClusterDeferPolicy applies where spec.namespaceSelector selects; remove spec.namespaceDefault"
type ClusterDeferPolicySpec struct {
	// namespaceSelector selects the namespaces whose Jobs the policy arms,
	// by the namespaces' labels ({} selects every namespace but kdefer's
	// own). Select on labels only the platform can set: whoever can label
	// a namespace can bring it in.
	// +required
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`

	// jobSelector narrows the policy to the Jobs of the selected namespaces
	// whose labels it selects (default: every Job). A Job's labels are its
	// author's, so it selects, it does not guard.
	// +optional
	JobSelector *metav1.LabelSelector `json:"jobSelector,omitempty"`

	// The policy fields. spec.locked keeps its DeferPolicy meaning, and a
	// locked ClusterDeferPolicy is mandatory: a Job it selects cannot opt
	// out with kdefer.io/skip nor name another DeferPolicy.
	DeferPolicySpec `json:",inline"`
}

// ClusterDeferPolicy arms the Jobs of the namespaces it selects: a platform
// team's "every Job here keeps its outputs", with no change to the Jobs.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cdpol,categories=kdefer
// +kubebuilder:printcolumn:name="Stage-Out",type=string,JSONPath=`.spec.stageOut.url`
// +kubebuilder:printcolumn:name="Locked",type=string,JSONPath=`.spec.locked`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a ClusterDeferPolicy's name is at most 63 characters: it is the value of the namespaces' kdefer.io/platform-policy label"
type ClusterDeferPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec selects namespaces (and optionally Jobs) and says what happens
	// to their pods' work volumes after the main containers end.
	// +required
	Spec ClusterDeferPolicySpec `json:"spec"`
}

// ClusterDeferPolicyList is a list of ClusterDeferPolicy.
// +kubebuilder:object:root=true
type ClusterDeferPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterDeferPolicy `json:"items"`
}
