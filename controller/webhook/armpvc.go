package webhook

import (
	"context"
	"encoding/json"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	"github.com/kdefer/kdefer/controller/webhook/review"
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
// controller retries the PVC, which then finds the run. What arming means
// is the controller's (controller.RunForNewClaim, controller.ArmClaim);
// this is the admission protocol around it.
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

// Handle answers one PVC creation.
func (a *PVCArmer) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.SubResource != "" {
		return admission.Allowed("")
	}
	pvc, err := review.PVC(&req.AdmissionRequest)
	if err != nil {
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
	run, err := controller.RunForNewClaim(ctx, a.Client, a.Reader, req.Namespace, ref)
	if err != nil {
		// Allowed all the same: the pod reconciler arms it.
		logger.Error(err, "arming at volume creation failed; the controller arms the pod")
		return admission.Allowed("armed by the controller")
	}
	if run == nil || !controller.ArmClaim(pvc, run) {
		return admission.Allowed("")
	}
	raw, err := json.Marshal(pvc)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	logger.V(1).Info("arming at volume creation", "deferrun", run.Name)
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}
