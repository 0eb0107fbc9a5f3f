package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/webhook/review"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/resolve"
)

// Paths of the ClusterDeferPolicy webhooks; deploy/webhook/webhooks.yaml
// uses them.
const (
	ValidateClusterPolicyPath = "/validate-kdefer-io-v1alpha1-clusterdeferpolicy"
	MutateNamespacePath       = "/mutate-v1-namespace"
)

// +kubebuilder:rbac:groups=kdefer.io,resources=clusterdeferpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// ValidateClusterPolicy checks a ClusterDeferPolicy with the rules of a
// DeferPolicy's spec (one validation, ValidateDeferPolicySpec) and its
// selectors.
func (h *Handlers) ValidateClusterPolicy(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	p, err := review.ClusterPolicy(&req.AdmissionRequest)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	spec := field.NewPath("spec")
	errs := v1.ValidateDeferPolicySpec(&p.Spec.DeferPolicySpec, spec)
	if !h.opts.Render.AllowFileURLs {
		errs = append(errs, v1.ValidateFileURLs(&p.Spec.DeferPolicySpec, spec)...)
	}
	opts := metav1validation.LabelSelectorValidationOptions{}
	errs = append(errs, metav1validation.ValidateLabelSelector(&p.Spec.NamespaceSelector, opts, spec.Child("namespaceSelector"))...)
	if p.Spec.JobSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(p.Spec.JobSelector, opts, spec.Child("jobSelector"))...)
	}
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return admission.Denied(fmt.Sprintf("ClusterDeferPolicy %s is invalid:\n- %s", p.Name, strings.Join(msgs, "\n- ")))
	}
	return admission.Allowed("").WithWarnings(render.PolicyWarnings(&p.Spec.DeferPolicySpec)...)
}

// MutateNamespace sets (or removes) a namespace's kdefer.io/platform-policy
// label as it is created or its labels change, as the controller does for
// namespaces that already exist: a Job created right after its namespace
// then reaches kdefer, and a label removed by hand comes back. The
// controller's cache of ClusterDeferPolicies decides.
func (h *Handlers) MutateNamespace(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	ns, err := review.Namespace(&req.AdmissionRequest)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if ns.Name == h.opts.Namespace() || ns.DeletionTimestamp != nil {
		return admission.Allowed("")
	}
	all, err := resolve.Cluster{Reader: h.reader, Cache: h.cache}.ClusterPolicies(ctx)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing the ClusterDeferPolicies: %w", err))
	}
	want, selected := resolve.PlatformLabel(all, ns.Labels)
	if cur, has := ns.Labels[v1.LabelPlatformPolicy]; has == selected && cur == want {
		return admission.Allowed("")
	}
	out := ns.DeepCopy()
	if !selected {
		delete(out.Labels, v1.LabelPlatformPolicy)
	} else {
		if out.Labels == nil {
			out.Labels = map[string]string{}
		}
		out.Labels[v1.LabelPlatformPolicy] = want
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	logf.FromContext(ctx).V(1).Info("labelled namespace for the platform's policies", "namespace", ns.Name, "value", want, "selected", selected)
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}
