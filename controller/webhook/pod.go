package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/webhook/review"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/resolve"
)

// MutatePodPath serves the pod rendering webhook.
const MutatePodPath = "/mutate-v1-pod"

// MutatePod renders an opted-in pod that no rendered template made: a bare
// pod, or a pod of an owner kdefer does not render (CI runners' pods,
// Tekton's, Jenkins agents). Only creations are rendered: a pod's spec is
// final once it is stored. Pods already rendered (from a rendered Job's
// template) pass untouched; deploy/webhook keeps them from reaching kdefer
// at all, so a kdefer outage never stops a Job's pods.
func (h *Handlers) MutatePod(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.SubResource != "" {
		return admission.Allowed("")
	}
	pod, err := review.Pod(&req.AdmissionRequest)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if pod.Labels[v1.LabelEnabled] != "true" || render.IsRenderedPod(pod) {
		return admission.Allowed("")
	}
	log := logf.FromContext(ctx).WithValues("pod", req.Namespace+"/"+review.Name(&req.AdmissionRequest))
	subject := resolve.PodSubject(pod)
	subject.Namespace = req.Namespace
	applied, deny := h.policyApplying(ctx, subject, "kdefer cannot manage this pod")
	if deny != nil {
		return *deny
	}
	pod = pod.DeepCopy()
	resolve.RecordCluster(&pod.Annotations, applied.ClusterName())
	rendered, err := render.Pod(pod, applied.Spec(), h.opts.Render)
	if err != nil {
		log.V(1).Info("refused pod", "problems", render.Problems(err))
		return denial("kdefer cannot manage this pod", err)
	}
	raw, err := json.Marshal(rendered)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encoding the rendered pod: %w", err))
	}
	log.V(1).Info("rendered pod")
	return admission.PatchResponseFromRaw(req.Object.Raw, raw).WithWarnings(render.PodWarnings(pod)...)
}
