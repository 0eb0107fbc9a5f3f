package uninstall

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// ReleaseKept deletes the work PVCs Run kept for DeferRun run in namespace
// ns (label kdefer.io/kept) and returns their names: no controller is there
// to release them, and the run itself may be gone with its CRD.
func ReleaseKept(ctx context.Context, c client.Client, ns, run string) ([]string, error) {
	var pvcs corev1.PersistentVolumeClaimList
	if err := c.List(ctx, &pvcs, client.InNamespace(ns), client.MatchingLabels{v1.LabelKept: v1.LabelValue(run)}); err != nil {
		return nil, fmt.Errorf("listing the work PVCs kept for deferrun %s/%s: %w", ns, run, err)
	}
	var names []string
	for i := range pvcs.Items {
		if err := DeleteClaim(ctx, c, &pvcs.Items[i]); err != nil {
			return names, err
		}
		names = append(names, pvcs.Items[i].Name)
	}
	return names, nil
}

// DeleteClaim deletes a work PVC without the controller: the admission
// policy that guards work volumes (deploy/policy) lets only the controller
// delete one labelled kdefer.io/work-volume, so the label goes first, as the
// policy's own message tells a user to do.
func DeleteClaim(ctx context.Context, c client.Client, pvc *corev1.PersistentVolumeClaim) error {
	if _, ok := pvc.Labels[v1.LabelWorkVolume]; ok {
		orig := pvc.DeepCopy()
		delete(pvc.Labels, v1.LabelWorkVolume)
		if err := c.Patch(ctx, pvc, client.MergeFrom(orig)); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("unlabelling work PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
		}
	}
	if err := c.Delete(ctx, pvc, client.Preconditions{UID: &pvc.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting work PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}
