package controller

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/podstate"
)

// CacheOptions scope the manager's caches to kdefer's objects, so unmanaged
// pods, PVCs and Jobs cost nothing, and strip managedFields (and the node
// status fields kdefer never reads) from what is cached.
func CacheOptions() cache.Options {
	exists := func(key string) labels.Selector {
		req, err := labels.NewRequirement(key, selection.Exists, nil)
		if err != nil {
			panic(err)
		}
		return labels.NewSelector().Add(*req)
	}
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                   {Label: exists(v1.LabelManaged), Transform: podstate.StripPod},
			&corev1.PersistentVolumeClaim{}: {Label: exists(v1.LabelWorkVolume), Transform: stripPVC},
			&batchv1.Job{}:                  {Label: labels.SelectorFromSet(labels.Set{v1.LabelEnabled: "true"})},
			&policyv1.PodDisruptionBudget{}: {Label: labels.SelectorFromSet(labels.Set{v1.LabelManaged: v1.ManagedDeferPod})},
			&corev1.Node{}:                  {Transform: stripNode},
		},
	}
}

// stripNode keeps what JudgeNode reads: the Ready condition.
func stripNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	n.Status.Images = nil
	n.Status.VolumesAttached = nil
	n.Status.VolumesInUse = nil
	n.Annotations = nil
	return n, nil
}

var _ toolscache.TransformFunc = stripNode

// stripPVC keeps a work PVC's metadata and phase: the reconcilers read its
// owners and patch or delete it, never update it whole. Its size is not kept
// (two maps a PVC, 7 MiB for 10,000 pods): the one reader, the retained
// volume gauge, takes it from the run, which records it when the volume is
// kept (RunReconciler.recordRetainedBytes).
func stripPVC(obj any) (any, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return obj, nil
	}
	pvc.ManagedFields = nil
	pvc.Annotations, pvc.Labels = nil, nil
	pvc.Spec = corev1.PersistentVolumeClaimSpec{}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: pvc.Status.Phase}
	return pvc, nil
}
