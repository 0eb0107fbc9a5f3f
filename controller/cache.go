package controller

import (
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
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
			&corev1.Pod{}:                   {Label: exists(v1.LabelManaged), Transform: stripPod},
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

// stripPod keeps what the reconcilers read from a managed pod (Classify,
// WorkClaims, BuildRun and its StageUserOf) and from a defer pod (Observe).
// The reconcilers only patch pods (never update them whole), so a stripped
// copy is safe to use.
func stripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p.ManagedFields = nil
	if p.Labels[v1.LabelManaged] == v1.ManagedDeferPod {
		return p, nil // small, and Observe reads most of it
	}
	p.Labels = keepKeys(p.Labels, nil)
	p.Annotations = keepKeys(p.Annotations, map[string]bool{batchv1.JobCompletionIndexAnnotation: true})
	slim := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
			// StageUserOf (BuildRun) reads the user and group.
			if sc := c.SecurityContext; sc != nil && (sc.RunAsUser != nil || sc.RunAsGroup != nil) {
				out[i].SecurityContext = &corev1.SecurityContext{RunAsUser: sc.RunAsUser, RunAsGroup: sc.RunAsGroup}
			}
			// Classify reads the memory limit (an exit 137 under it is an OOM kill).
			if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
				out[i].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: q}
			}
		}
		return out
	}
	// Native sidecars never count (Classify reads regular containers only),
	// and the work volumes are summarised in one annotation WorkClaims reads.
	var work []string
	for _, c := range WorkClaims(p) {
		work = append(work, c.Name)
	}
	if len(work) > 0 {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[annotationCachedWorkVolumes] = strings.Join(work, ",")
	}
	spec := corev1.PodSpec{NodeName: p.Spec.NodeName, Containers: slim(p.Spec.Containers)}
	if sc := p.Spec.SecurityContext; sc != nil {
		// StageUserOf (BuildRun) reads the users and groups.
		spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: sc.RunAsUser, RunAsGroup: sc.RunAsGroup,
			FSGroup: sc.FSGroup, SupplementalGroups: sc.SupplementalGroups}
	}
	p.Spec = spec
	p.GenerateName = ""
	// Classify reads the phase, the reason, DisruptionTarget conditions and
	// how each regular container terminated.
	st := corev1.PodStatus{Phase: p.Status.Phase, Reason: p.Status.Reason}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			st.Conditions = append(st.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
		}
	}
	if n := len(p.Status.ContainerStatuses); n > 0 {
		st.ContainerStatuses = make([]corev1.ContainerStatus, n)
		for i, cs := range p.Status.ContainerStatuses {
			st.ContainerStatuses[i].Name = cs.Name
			if t := cs.State.Terminated; t != nil {
				st.ContainerStatuses[i].State.Terminated = &corev1.ContainerStateTerminated{
					ExitCode: t.ExitCode, Signal: t.Signal, Reason: t.Reason, FinishedAt: t.FinishedAt}
			}
		}
	}
	p.Status = st
	return p, nil
}

// keepKeys keeps kdefer's keys (kdefer.io/...) and the extra ones.
func keepKeys(m map[string]string, extra map[string]bool) map[string]string {
	var out map[string]string
	for k, v := range m {
		if strings.HasPrefix(k, v1.AnnotationPrefix) || extra[k] {
			if out == nil {
				out = make(map[string]string, len(m))
			}
			out[k] = v
		}
	}
	return out
}

// stripPVC keeps a work PVC's metadata and size: the reconcilers read its
// owners and patch or delete it, never update it whole.
func stripPVC(obj any) (any, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return obj, nil
	}
	pvc.ManagedFields = nil
	pvc.Annotations, pvc.Labels = nil, nil
	// The size is kept for kdefer_retained_volume_bytes.
	var spec corev1.PersistentVolumeClaimSpec
	if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: q}
	}
	st := corev1.PersistentVolumeClaimStatus{Phase: pvc.Status.Phase}
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		st.Capacity = corev1.ResourceList{corev1.ResourceStorage: q}
	}
	pvc.Spec, pvc.Status = spec, st
	return pvc, nil
}
