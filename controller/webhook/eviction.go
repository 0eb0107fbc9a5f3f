package webhook

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// ValidateEvictionPath serves the pods/eviction guard.
const ValidateEvictionPath = "/validate-v1-pod-eviction"

// +kubebuilder:rbac:groups="",resources=pods,verbs=get

// ValidateEviction refuses, with 429 Too Many Requests, the eviction of a
// Pending defer pod. The defer pods' PodDisruptionBudget covers Running
// pods only: the Eviction API ignores budgets of Pending
// pods, and a defer pod is Pending while its stage-out runs as an init
// container (whenever the policy has defer containers) or while its image
// is pulled. 429 is the answer `kubectl drain` retries on (every 5 s, until
// its --timeout), exactly as for a budget; any other answer would make drain
// give up. Anything else (a Running defer pod is its budget's to refuse, a
// finished one or one already being deleted may go) is allowed. The webhook is registered with failurePolicy Ignore:
// while kdefer is down evictions proceed and the run recreates its pod.
func (h *Handlers) ValidateEviction(ctx context.Context, req admission.Request) admission.Response {
	if req.SubResource != "eviction" || req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	pod := &corev1.Pod{}
	err := h.reader.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.Name}, pod)
	if apierrors.IsNotFound(err) {
		return admission.Allowed("")
	}
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("read pod %s/%s: %w", req.Namespace, req.Name, err))
	}
	if msg := refuseEviction(pod); msg != "" {
		logf.FromContext(ctx).Info("refusing eviction of a running defer pod", "pod", req.Namespace+"/"+req.Name, "phase", pod.Status.Phase)
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
			Allowed: false,
			Result: &metav1.Status{
				Status:  metav1.StatusFailure,
				Code:    http.StatusTooManyRequests,
				Reason:  metav1.StatusReasonTooManyRequests,
				Message: msg,
			},
		}}
	}
	return admission.Allowed("")
}

// refuseEviction returns why pod must not be evicted now, or "".
func refuseEviction(pod *corev1.Pod) string {
	if pod.Labels[v1.LabelManaged] != v1.ManagedDeferPod || pod.DeletionTimestamp != nil {
		return ""
	}
	// Running pods are the PodDisruptionBudget's (its refusal says so, and
	// it works without kdefer); finished ones may go.
	if pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return ""
	}
	run := pod.Labels[v1.LabelDeferRun]
	return fmt.Sprintf("defer pod %s/%s is running the defer steps of a finished pod (DeferRun %s); it is Pending while its init steps run, where PodDisruptionBudgets do not apply, so kdefer refuses its eviction until it ends; to give the outputs up: kdefer release -n %s deferrun/%s",
		pod.Namespace, pod.Name, run, pod.Namespace, run)
}
