package controller

import (
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/podstate"
)

// BuildRun returns the DeferRun that arms pod: named after the pod, with the
// effective policy snapshot, the Job's name and UID in labels, and, when the
// policy could not be resolved, the pod's kdefer annotations (so the run can
// re-resolve it after the pod is gone).
//
// The run has no owner. It must outlive the pod (it co-owns the pod's volume
// after the pod is deleted), and it must not be a dependent of the Job
// either: when a Job is deleted with foreground propagation (kubectl delete
// --cascade=foreground, ttlSecondsAfterFinished), the garbage collector
// deletes every dependent that has dependents of its own in the foreground
// too, whatever its blockOwnerDeletion, and so would delete the run's
// dependents, the work PVC among them, under the run's finalizer (seen on
// the real cluster). Finished runs go after their TTL.
func BuildRun(pod *corev1.Pod, policyName string, policy v1.DeferPolicySpec, configErr string) *v1.DeferRun {
	run := &v1.DeferRun{
		ObjectMeta: metav1.ObjectMeta{
			Name:        pod.Name,
			Namespace:   pod.Namespace,
			Labels:      map[string]string{v1.LabelPodName: v1.LabelValue(pod.Name)},
			Annotations: map[string]string{},
			Finalizers:  []string{v1.DeferRunFinalizer},
		},
		Spec: v1.DeferRunSpec{
			PodName:    pod.Name,
			PodUID:     pod.UID,
			Volumes:    podstate.WorkClaims(pod),
			Policy:     policy,
			PolicyName: policyName,
			StageUser:  StageUserOf(pod),
		},
	}
	if configErr != "" {
		// The run re-resolves its policy from these once the cause is fixed.
		run.Annotations = configAnnotations(pod.Annotations)
		run.Annotations[annotationConfigError] = configErr
	}
	if pod.Annotations[v1.AnnotationSkip] == "true" {
		run.Annotations[v1.AnnotationSkip] = "true"
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "Job" && strings.HasPrefix(ref.APIVersion, batchv1.GroupName+"/") {
		run.Spec.JobName = ref.Name
		run.Labels[v1.LabelJobName] = v1.LabelValue(ref.Name)
		run.Labels[labelJobUID] = string(ref.UID)
	}
	if s, ok := pod.Annotations[batchv1.JobCompletionIndexAnnotation]; ok {
		if i, err := strconv.Atoi(s); err == nil {
			run.Spec.CompletionIndex = ptr.To(int32(i))
		}
	}
	return run
}

// StageUserOf returns who the built-in stage-out step of pod's run runs as,
// so that it can read what the pod's containers wrote (Python's
// tempfile.mkstemp and `umask 077` leave files only their owner can read):
//
//   - runAsUser: the effective UID (the container's runAsUser, else the
//     pod's) of the regular containers, when every one has one, the same,
//     and it is not root. Otherwise the defer pod's user, 65532: kdefer never
//     runs a step as root, and cannot know a user only the image names.
//     Init containers and native sidecars do not count: the outputs are the
//     main containers'.
//   - runAsGroup: likewise their effective GID, when runAsUser is set.
//   - supplementalGroups: the pod's fsGroup and supplementalGroups and the
//     regular containers' GIDs, without 0, so group-readable files can be
//     read whoever the step runs as.
//
// nil when there is nothing to change.
func StageUserOf(pod *corev1.Pod) *v1.StageUser {
	var psc corev1.PodSecurityContext
	if pod.Spec.SecurityContext != nil {
		psc = *pod.Spec.SecurityContext
	}
	var uid, gid *int64
	sameUID, sameGID := len(pod.Spec.Containers) > 0, len(pod.Spec.Containers) > 0
	groups := map[int64]bool{}
	for i, c := range pod.Spec.Containers {
		u, g := psc.RunAsUser, psc.RunAsGroup
		if sc := c.SecurityContext; sc != nil {
			if sc.RunAsUser != nil {
				u = sc.RunAsUser
			}
			if sc.RunAsGroup != nil {
				g = sc.RunAsGroup
			}
		}
		if g != nil {
			groups[*g] = true
		}
		if i == 0 {
			uid, gid = u, g
			continue
		}
		sameUID = sameUID && u != nil && uid != nil && *u == *uid
		sameGID = sameGID && g != nil && gid != nil && *g == *gid
	}
	if psc.FSGroup != nil {
		groups[*psc.FSGroup] = true
	}
	for _, g := range psc.SupplementalGroups {
		groups[g] = true
	}
	delete(groups, 0)
	su := &v1.StageUser{}
	if sameUID && uid != nil && *uid > 0 {
		su.RunAsUser = ptr.To(*uid)
		if sameGID && gid != nil && *gid > 0 {
			su.RunAsGroup = ptr.To(*gid)
		}
	}
	for g := range groups {
		su.SupplementalGroups = append(su.SupplementalGroups, g)
	}
	slices.Sort(su.SupplementalGroups)
	if su.RunAsUser == nil && len(su.SupplementalGroups) == 0 {
		return nil
	}
	return su
}

func configAnnotations(in map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range append(slices.Clip(v1.ConfigAnnotations), v1.AnnotationClusterPolicy) {
		if v, ok := in[k]; ok {
			out[k] = v
		}
	}
	return out
}

// AdoptedOwners returns the ownerReferences a work PVC should have once run
// co-owns it, and whether they differ from the current ones. The run is a
// second, non-controller owner with blockOwnerDeletion false, so the
// garbage collector keeps the PVC when the pod goes, under any propagation.
// When the pod is already being deleted, its reference is dropped instead:
// a foreground deletion then finishes at once, rather than when the garbage
// collector's backoff next retries (up to 1000 s).
func AdoptedOwners(pvc *corev1.PersistentVolumeClaim, run *v1.DeferRun, podDeleting bool) ([]metav1.OwnerReference, bool) {
	var out []metav1.OwnerReference
	has, changed := false, false
	for _, ref := range pvc.OwnerReferences {
		switch {
		case ref.UID == run.UID:
			has = true
			out = append(out, ref)
		case podDeleting && ref.Kind == "Pod" && ref.UID == run.Spec.PodUID:
			changed = true
		default:
			out = append(out, ref)
		}
	}
	if !has {
		out = append(out, runOwnerRef(run, false))
		changed = true
	}
	return out, changed
}

// HasOwner reports whether obj lists the run as an owner.
func HasOwner(refs []metav1.OwnerReference, run *v1.DeferRun) bool {
	return ownedBy(refs, run.UID)
}
