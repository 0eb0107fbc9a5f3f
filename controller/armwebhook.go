package controller

import (
	"context"
	"encoding/json"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// ArmPVCPath serves the work-PVC arming webhook.
const ArmPVCPath = "/mutate-v1-persistentvolumeclaim"

// PVCArmer arms a managed pod at the moment the ephemeral-volume controller
// creates its work PVC: it creates the pod's DeferRun and returns the PVC
// with the run as its second owner, so the PVC is born co-owned and arming
// costs one API write (the run) instead of two (the run, then a patch of the
// PVC). The pod reconciler still arms every pod this did not (kdefer was
// down, the webhook timed out, the PVC came before kdefer): the webhook is
// registered with failurePolicy Ignore. Dry runs are answered without the
// run (sideEffects NoneOnDryRun). A PVC whose creation fails after this
// (a quota, another webhook) leaves the run waiting; the ephemeral-volume
// controller retries the PVC, which then finds the run.
type PVCArmer struct {
	// Client creates runs and reads policies (the manager's cache).
	Client client.Client
	// Reader reads the pod and an existing run from the API server: the pod
	// was created a moment ago, the run perhaps too, by a retried request.
	Reader client.Reader
}

// Register adds the armer to a webhook server.
func (a *PVCArmer) Register(srv webhook.Server) {
	srv.Register(ArmPVCPath, &webhook.Admission{Handler: a})
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get
// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns,verbs=get;create

// Handle answers one PVC creation.
func (a *PVCArmer) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.SubResource != "" {
		return admission.Allowed("")
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := json.Unmarshal(req.Object.Raw, pvc); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	ref := metav1.GetControllerOfNoCopy(pvc)
	if _, work := pvc.Labels[v1.LabelWorkVolume]; !work || ref == nil || ref.Kind != "Pod" || ref.APIVersion != "v1" {
		return admission.Allowed("not the work volume of a pod")
	}
	if req.DryRun != nil && *req.DryRun {
		return admission.Allowed("dry run: not armed")
	}
	logger := log.FromContext(ctx).WithValues("pod", req.Namespace+"/"+ref.Name, "pvc", pvc.Name)
	run, err := a.runFor(ctx, req.Namespace, ref)
	if err != nil {
		// Allowed all the same: the pod reconciler arms it.
		logger.Error(err, "arming at volume creation failed; the controller arms the pod")
		return admission.Allowed("armed by the controller")
	}
	if run == nil || HasOwner(pvc.OwnerReferences, run) {
		return admission.Allowed("")
	}
	pvc.OwnerReferences = append(pvc.OwnerReferences, runOwnerRef(run, false))
	raw, err := json.Marshal(pvc)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	logger.V(1).Info("arming at volume creation", "deferrun", run.Name)
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// runFor returns the DeferRun of the PVC's pod, creating it if need be; nil
// when the pod is not one to arm now (not managed, gone, being deleted) or
// a run of its name serves another pod.
func (a *PVCArmer) runFor(ctx context.Context, ns string, ref *metav1.OwnerReference) (*v1.DeferRun, error) {
	pod := &corev1.Pod{}
	if err := a.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, pod); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if pod.UID != ref.UID || pod.Labels[v1.LabelManaged] != "true" || pod.DeletionTimestamp != nil {
		return nil, nil
	}
	existing := func() (*v1.DeferRun, error) {
		run := &v1.DeferRun{}
		if err := a.Reader.Get(ctx, client.ObjectKeyFromObject(pod), run); err != nil {
			return nil, err
		}
		if run.Spec.PodUID != pod.UID {
			return nil, nil // an earlier pod's: the pod reconciler sorts it out
		}
		return run, nil
	}
	if run, err := existing(); !apierrors.IsNotFound(err) {
		return run, err
	}
	run, err := RunFor(ctx, a.Client, pod)
	if err != nil {
		return nil, err
	}
	if err := a.Client.Create(ctx, run); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return existing()
		}
		return nil, err
	}
	Metrics.Writes.WithLabelValues("arm").Inc()
	return run, nil
}
