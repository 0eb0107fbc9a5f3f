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
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get
// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns,verbs=get

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
//
// A defer pod is known by kdefer's owner references, not by its labels or
// name, which anyone who can create a pod can give it: see deferRunOf. The
// refusal lasts at most the run's deadline (capped by kdefer-controller
// --max-deadline), after which the run is finished and the pod may go.
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
	if !evictionGuarded(pod) {
		return admission.Allowed("")
	}
	run, err := h.deferRunOf(ctx, pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if run == nil {
		return admission.Allowed("")
	}
	logf.FromContext(ctx).Info("refusing eviction of a pending defer pod", "pod", req.Namespace+"/"+req.Name, "phase", pod.Status.Phase, "deferRun", run.Name)
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusTooManyRequests,
			Reason:  metav1.StatusReasonTooManyRequests,
			Message: refusal(pod, run.Name),
		},
	}}
}

// evictionGuarded says whether pod is in a state the guard protects, were it
// a defer pod: Pending (or just created), not being deleted. Running pods
// are the PodDisruptionBudget's (its refusal says so, and it works without
// kdefer); finished ones may go.
func evictionGuarded(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && (pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "")
}

// deferRunOf returns the unfinished DeferRun whose defer pod pod is, or nil.
// The proof is what kdefer writes and a user's pod cannot borrow without
// colliding with the real one: pod's controller is the DeferRun, or a work
// PVC that the DeferRun co-owns (OwnByVolumes), with matching UIDs; the run
// exists and is unfinished; and pod has the run's defer pod name.
func (h *Handlers) deferRunOf(ctx context.Context, pod *corev1.Pod) (*v1.DeferRun, error) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil {
		return nil, nil
	}
	var runRef *metav1.OwnerReference
	switch {
	case ref.APIVersion == v1.GroupVersion.String() && ref.Kind == "DeferRun":
		runRef = ref
	case ref.APIVersion == "v1" && ref.Kind == "PersistentVolumeClaim":
		pvc := &corev1.PersistentVolumeClaim{}
		err := h.reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, pvc)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read PersistentVolumeClaim %s/%s: %w", pod.Namespace, ref.Name, err)
		}
		if pvc.UID != ref.UID {
			return nil, nil
		}
		for i, r := range pvc.OwnerReferences {
			if r.APIVersion == v1.GroupVersion.String() && r.Kind == "DeferRun" {
				runRef = &pvc.OwnerReferences[i]
			}
		}
	}
	if runRef == nil {
		return nil, nil
	}
	run := &v1.DeferRun{}
	err := h.reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: runRef.Name}, run)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read DeferRun %s/%s: %w", pod.Namespace, runRef.Name, err)
	}
	if run.UID != runRef.UID || v1.DeferPodName(run) != pod.Name || v1.Finished(run) {
		return nil, nil
	}
	return run, nil
}

// refusal is the message of a refused eviction.
func refusal(pod *corev1.Pod, run string) string {
	return fmt.Sprintf("defer pod %s/%s is running the defer steps of a finished pod (DeferRun %s); it is Pending while its init steps run, where PodDisruptionBudgets do not apply, so kdefer refuses its eviction until it ends; to give the outputs up: kdefer release -n %s deferrun/%s",
		pod.Namespace, pod.Name, run, pod.Namespace, run)
}
