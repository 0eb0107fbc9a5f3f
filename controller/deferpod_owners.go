package controller

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// DeferPDBName is the name of the one PodDisruptionBudget of a namespace's
// defer pods.
const DeferPDBName = "kdefer-defer-pods"

// BuildDeferPDB returns the PodDisruptionBudget that makes `kubectl drain`
// wait for every running defer pod of run's namespace instead of evicting
// it: one per namespace, not one per run, so it costs no write per run.
//
// minAvailable is an integer far above any pod count, so the disruption
// controller always allows 0 disruptions and the Eviction API refuses every
// eviction of a Running defer pod (Pending and finished pods are not
// protected by any budget). An integer minAvailable needs no scale
// subresource on the pods' owner.
//
// It is owned (not as controller, not blocking) by the run that created
// it, like the pre-pull pod: it goes with that run (with its Job, or after
// the run's TTL), so nothing is left once a namespace's runs are gone; if
// defer pods still run then, their runs create it again (the reconciler
// watches its deletion).
func BuildDeferPDB(run *v1.DeferRun) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{
			Name: DeferPDBName, Namespace: run.Namespace,
			Labels:          map[string]string{v1.LabelManaged: v1.ManagedDeferPod},
			OwnerReferences: []metav1.OwnerReference{runOwnerRef(run, false)},
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(math.MaxInt32)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{
				v1.LabelManaged: v1.ManagedDeferPod}},
		},
	}
}

// OwnByVolumes makes the defer pod a dependent of the run's work PVCs
// instead of the run, if pvcs holds every one of them (else it stays the
// run's). The release deletes the PVCs in the foreground, so the garbage
// collector deletes the finished defer pod first; the PVC, which
// kubernetes.io/pvc-protection keeps while any pod mounts it, then goes at
// once and its disk is freed, instead of after the run's TTL. A retained
// volume keeps its defer pod, and its logs, until it is released.
//
// The references must block the owner's deletion. A foreground delete waits
// only for blocking dependents: with a non-blocking reference the garbage
// collector drops the PVC's foregroundDeletion finalizer at once, and the
// defer pod is deleted only if the collector happened to look at it while
// that finalizer was still there. Otherwise the PVC (kept by pvc-protection
// while the pod exists) counts as a live owner, the pod waits for the PVC
// and the PVC for the pod, until something else deletes either (seen: 72 s,
// until the Job was deleted; at worst the run's TTL).
func OwnByVolumes(pod *corev1.Pod, run *v1.DeferRun, pvcs map[string]*corev1.PersistentVolumeClaim) bool {
	refs := make([]metav1.OwnerReference, 0, len(run.Spec.Volumes))
	for _, v := range run.Spec.Volumes {
		pvc := pvcs[v.ClaimName]
		if pvc == nil || pvc.UID == "" {
			return false
		}
		// The first is the controller: `kubectl drain` refuses to evict
		// a pod without one ("declare no controller") instead of waiting
		// for its PodDisruptionBudget.
		refs = append(refs, metav1.OwnerReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: pvc.Name, UID: pvc.UID,
			Controller: ptr.To(len(refs) == 0), BlockOwnerDeletion: ptr.To(true)})
	}
	if len(refs) == 0 {
		return false
	}
	pod.OwnerReferences = refs
	return true
}

// runOwnerRef is an ownerReference to the DeferRun. controller=true for the
// defer pod; for work PVCs it is a second, non-controller owner with
// blockOwnerDeletion false, so it never delays the pod's or Job's deletion
// (and likewise for the pre-pull pod and the namespace's PDB).
func runOwnerRef(run *v1.DeferRun, controller bool) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         v1.GroupVersion.String(),
		Kind:               "DeferRun",
		Name:               run.Name,
		UID:                run.UID,
		Controller:         ptr.To(controller),
		BlockOwnerDeletion: ptr.To(controller),
	}
}
