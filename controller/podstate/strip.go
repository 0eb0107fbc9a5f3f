package podstate

import (
	"fmt"
	"strings"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// AnnotationCachedWorkVolumes exists only in the controller's cache: the pod
// transform (StripPod) replaces spec.volumes by the names of the work volumes.
const AnnotationCachedWorkVolumes = "kdefer.io/cached-work-volumes"

// WorkClaims lists a pod's work volumes: generic ephemeral volumes whose
// claim template render labelled kdefer.io/work-volume. The ephemeral-volume
// controller names their PVCs POD-VOLUME.
func WorkClaims(pod *corev1.Pod) []v1.RetainedVolume {
	var out []v1.RetainedVolume
	if names, ok := pod.Annotations[AnnotationCachedWorkVolumes]; ok && len(pod.Spec.Volumes) == 0 {
		for _, n := range strings.Split(names, ",") {
			out = append(out, v1.RetainedVolume{Name: n, ClaimName: pod.Name + "-" + n})
		}
		return out
	}
	for _, vol := range pod.Spec.Volumes {
		e := vol.Ephemeral
		if e == nil || e.VolumeClaimTemplate == nil {
			continue
		}
		if _, ok := e.VolumeClaimTemplate.Labels[v1.LabelWorkVolume]; !ok {
			continue
		}
		out = append(out, v1.RetainedVolume{Name: vol.Name, ClaimName: pod.Name + "-" + vol.Name})
	}
	return out
}

// StripPod keeps what the reconcilers read from a managed pod (Classify,
// WorkClaims, BuildRun and its StageUserOf) and from a defer pod (Observe).
// The reconcilers only patch pods (never update them whole), so a stripped
// copy is safe to use.
func StripPod(obj any) (any, error) {
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
		p.Annotations[AnnotationCachedWorkVolumes] = strings.Join(work, ",")
	}
	spec := corev1.PodSpec{NodeName: p.Spec.NodeName, Containers: slimContainers.get(p.Spec.Containers)}
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

// slimContainers holds the slim copies of the pods' containers.
var slimContainers = &sharedContainers{sets: map[string][]corev1.Container{}}

// sharedContainers hands out one slim copy of the containers (what Classify
// and StageUserOf read: each one's name, restart policy, user, group and
// memory limit) to every pod whose containers slim to the same: the pods of
// one template share it, where each would otherwise hold ~400 bytes a
// container (a corev1.Container is that large, whatever it holds), ~6% of
// what the controller holds a pod (make bench-controller). Sharing is safe:
// the cache hands out deep copies, and neither the reconcilers nor the event
// handlers, which see the cached object itself, change a pod's spec. At most
// maxSharedContainers distinct sets are kept (a few per Job template in
// practice); beyond, each pod gets a copy of its own.
type sharedContainers struct {
	mu   sync.Mutex
	sets map[string][]corev1.Container
}

// maxSharedContainers bounds sharedContainers.sets: ~500 bytes a set, so at
// most ~2 MiB whatever the pods hold.
const maxSharedContainers = 4096

func (s *sharedContainers) get(cs []corev1.Container) []corev1.Container {
	slim := make([]corev1.Container, len(cs))
	var key strings.Builder
	for i, c := range cs {
		slim[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
		fmt.Fprintf(&key, "%s/%v", c.Name, ptrValue(c.RestartPolicy))
		// StageUserOf (BuildRun) reads the user and group.
		if sc := c.SecurityContext; sc != nil && (sc.RunAsUser != nil || sc.RunAsGroup != nil) {
			slim[i].SecurityContext = &corev1.SecurityContext{RunAsUser: sc.RunAsUser, RunAsGroup: sc.RunAsGroup}
			fmt.Fprintf(&key, "/u%v/g%v", ptrValue(sc.RunAsUser), ptrValue(sc.RunAsGroup))
		}
		// Classify reads the memory limit (an exit 137 under it is an OOM kill).
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			slim[i].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: q}
			fmt.Fprintf(&key, "/m%s", q.String())
		}
		key.WriteByte(0)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if shared, ok := s.sets[key.String()]; ok {
		return shared
	}
	if len(s.sets) < maxSharedContainers {
		s.sets[key.String()] = slim
	}
	return slim
}

// ptrValue is *p, or "-" for nil, for a key.
func ptrValue[T any](p *T) any {
	if p == nil {
		return "-"
	}
	return *p
}

// keepKeys keeps kdefer's keys (kdefer.io/...) and the extra ones, in a map
// sized for them alone: the cache holds one per pod, and a map sized for all
// of a pod's labels or annotations (most of them the user's, dropped here)
// costs several times as much.
func keepKeys(m map[string]string, extra map[string]bool) map[string]string {
	kept := func(k string) bool { return strings.HasPrefix(k, v1.AnnotationPrefix) || extra[k] }
	n := 0
	for k := range m {
		if kept(k) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make(map[string]string, n)
	for k, v := range m {
		if kept(k) {
			out[k] = v
		}
	}
	return out
}
