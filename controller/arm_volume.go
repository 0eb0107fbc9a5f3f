package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get
// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns,verbs=get;create

// RunForNewClaim arms a managed pod at the moment its work PVC is created
// (package webhook's PVC arming handler calls it): it returns the pod's
// DeferRun, creating it through c if need be, so the PVC can be born
// co-owned by it (ArmClaim). reader reads the pod and an existing run from
// the API server: the pod was created a moment ago, the run perhaps too, by
// a retried request. nil when the pod (podRef, the PVC's controller, in
// namespace ns) is not one to arm now (not managed, gone, being deleted) or
// a run of its name serves another pod: the pod reconciler arms it.
func RunForNewClaim(ctx context.Context, c client.Client, reader client.Reader, ns string, podRef *metav1.OwnerReference) (*v1.DeferRun, error) {
	pod := &corev1.Pod{}
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: podRef.Name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading pod %s/%s: %w", ns, podRef.Name, err)
	}
	if pod.UID != podRef.UID || pod.Labels[v1.LabelManaged] != "true" || pod.DeletionTimestamp != nil {
		return nil, nil
	}
	existing := func() (*v1.DeferRun, error) {
		run := &v1.DeferRun{}
		if err := reader.Get(ctx, client.ObjectKeyFromObject(pod), run); err != nil {
			return nil, err
		}
		if run.Spec.PodUID != pod.UID {
			return nil, nil // an earlier pod's: the pod reconciler sorts it out
		}
		return run, nil
	}
	if run, err := existing(); !apierrors.IsNotFound(err) {
		if err != nil {
			return nil, fmt.Errorf("reading the DeferRun of pod %s/%s: %w", ns, pod.Name, err)
		}
		return run, nil
	}
	run, err := RunFor(ctx, c, pod)
	if err != nil {
		return nil, err
	}
	if err := c.Create(ctx, run); err != nil {
		if apierrors.IsAlreadyExists(err) {
			run, err := existing()
			if err != nil {
				return nil, fmt.Errorf("reading the DeferRun of pod %s/%s: %w", ns, pod.Name, err)
			}
			return run, nil
		}
		return nil, fmt.Errorf("creating the DeferRun of pod %s/%s: %w", ns, pod.Name, err)
	}
	Metrics.Writes.WithLabelValues("arm").Inc()
	return run, nil
}

// ArmClaim makes run a second owner of a work PVC about to be created; false
// when it already is one.
func ArmClaim(pvc *corev1.PersistentVolumeClaim, run *v1.DeferRun) bool {
	if HasOwner(pvc.OwnerReferences, run) {
		return false
	}
	pvc.OwnerReferences = append(pvc.OwnerReferences, runOwnerRef(run, false))
	return true
}
