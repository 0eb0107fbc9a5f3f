// Package testing holds what the controller's tests share: builders of the
// objects the controller sees and makes (managed pods, work PVCs, DeferRuns),
// in the style of Kueue's and JobSet's wrappers,
//
//	MakePod("p", "ns").OnNode("n1").Evicted().Obj()
//
// and the kubelet's status shapes (kubelet.go). What works through a client
// is in package clienttest, so this one stays free of controller-runtime.
// Jobs and DeferPolicies are built with package render/testing, the one
// builder of each type. Only tests and test/ import it; production code
// never does.
package testing

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// T0 is the reference time builders use for timestamps.
var T0 = time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)

// PodWrapper builds a managed pod as render leaves it: label, finalizer, a
// work volume backed by a generic ephemeral PVC, one main container.
type PodWrapper struct{ corev1.Pod }

// MakePod returns a running managed pod with one main container "main".
func MakePod(name, ns string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, UID: types.UID("uid-" + name),
			Labels:      map[string]string{v1.LabelManaged: "true"},
			Annotations: map[string]string{v1.AnnotationStageOut: "s3://bucket/{namespace}/{pod}/"},
			Finalizers:  []string{v1.PodFinalizer},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox",
				VolumeMounts: []corev1.VolumeMount{{Name: v1.DefaultWorkVolumeName, MountPath: v1.DefaultWorkMountPath}},
			}},
			Volumes: []corev1.Volume{{
				Name: v1.DefaultWorkVolumeName,
				VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
					VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1.LabelWorkVolume: v1.DefaultWorkVolumeName}},
						Spec: corev1.PersistentVolumeClaimSpec{
							AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
							Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
								corev1.ResourceStorage: resource.MustParse("1Gi")}},
						},
					},
				}},
			}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(T0)}},
			}},
		},
	}}
}

// Obj returns the pod.
func (w *PodWrapper) Obj() *corev1.Pod { return &w.Pod }

// OnNode sets spec.nodeName.
func (w *PodWrapper) OnNode(n string) *PodWrapper { w.Spec.NodeName = n; return w }

// UID sets the UID.
func (w *PodWrapper) UID(u string) *PodWrapper { w.ObjectMeta.UID = types.UID(u); return w }

// Annotation sets an annotation.
func (w *PodWrapper) Annotation(k, v string) *PodWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
	return w
}

// OwnedByJob adds the Job's controller ownerReference and job-name label.
func (w *PodWrapper) OwnedByJob(name string, uid types.UID) *PodWrapper {
	w.OwnerReferences = append(w.OwnerReferences, metav1.OwnerReference{
		APIVersion: "batch/v1", Kind: "Job", Name: name, UID: uid,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	})
	w.Labels[batchv1.JobNameLabel] = name
	return w
}

// NoFinalizer removes kdefer's pod finalizer.
func (w *PodWrapper) NoFinalizer() *PodWrapper { w.Finalizers = nil; return w }

// Sidecar adds a native sidecar (an init container with restartPolicy
// Always) that is still running.
func (w *PodWrapper) Sidecar(name string) *PodWrapper {
	w.Spec.InitContainers = append(w.Spec.InitContainers, corev1.Container{
		Name: name, Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)})
	w.Status.InitContainerStatuses = append(w.Status.InitContainerStatuses, corev1.ContainerStatus{
		Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(T0)}}})
	return w
}

// InitContainer adds an init container that has completed.
func (w *PodWrapper) InitContainer(name string) *PodWrapper {
	w.Spec.InitContainers = append(w.Spec.InitContainers, corev1.Container{Name: name, Image: "busybox"})
	w.Status.InitContainerStatuses = append(w.Status.InitContainerStatuses, corev1.ContainerStatus{
		Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: metav1.NewTime(T0), FinishedAt: metav1.NewTime(T0)}}})
	return w
}

// MemoryLimit sets the memory limit of every main container.
func (w *PodWrapper) MemoryLimit(q string) *PodWrapper {
	for i := range w.Spec.Containers {
		w.Spec.Containers[i].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}
	}
	return w
}

// RunAsUser sets the pod's securityContext.runAsUser.
func (w *PodWrapper) RunAsUser(uid int64) *PodWrapper {
	w.podSecurityContext().RunAsUser = ptr.To(uid)
	return w
}

// RunAsGroup sets the pod's securityContext.runAsGroup.
func (w *PodWrapper) RunAsGroup(gid int64) *PodWrapper {
	w.podSecurityContext().RunAsGroup = ptr.To(gid)
	return w
}

// FSGroup sets the pod's securityContext.fsGroup.
func (w *PodWrapper) FSGroup(gid int64) *PodWrapper {
	w.podSecurityContext().FSGroup = ptr.To(gid)
	return w
}

// SupplementalGroups sets the pod's securityContext.supplementalGroups.
func (w *PodWrapper) SupplementalGroups(gids ...int64) *PodWrapper {
	w.podSecurityContext().SupplementalGroups = gids
	return w
}

func (w *PodWrapper) podSecurityContext() *corev1.PodSecurityContext {
	if w.Spec.SecurityContext == nil {
		w.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	return w.Spec.SecurityContext
}

// ContainerRunAsUser sets securityContext.runAsUser of container name (a
// main or an init container).
func (w *PodWrapper) ContainerRunAsUser(name string, uid int64) *PodWrapper {
	w.containerSecurityContext(name).RunAsUser = ptr.To(uid)
	return w
}

// ContainerRunAsGroup sets securityContext.runAsGroup of container name (a
// main or an init container).
func (w *PodWrapper) ContainerRunAsGroup(name string, gid int64) *PodWrapper {
	w.containerSecurityContext(name).RunAsGroup = ptr.To(gid)
	return w
}

func (w *PodWrapper) containerSecurityContext(name string) *corev1.SecurityContext {
	for _, cs := range [][]corev1.Container{w.Spec.Containers, w.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == name {
				if cs[i].SecurityContext == nil {
					cs[i].SecurityContext = &corev1.SecurityContext{}
				}
				return cs[i].SecurityContext
			}
		}
	}
	panic("no container " + name)
}

// Container adds another running main container.
func (w *PodWrapper) Container(name string) *PodWrapper {
	w.Spec.Containers = append(w.Spec.Containers, corev1.Container{Name: name, Image: "busybox"})
	w.Status.ContainerStatuses = append(w.Status.ContainerStatuses, corev1.ContainerStatus{
		Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(T0)}}})
	return w
}

// Terminated ends main container name with the exit code and reason at
// T0+after.
func (w *PodWrapper) Terminated(name string, code int32, reason string, after time.Duration) *PodWrapper {
	for i := range w.Status.ContainerStatuses {
		if w.Status.ContainerStatuses[i].Name == name {
			w.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, StartedAt: metav1.NewTime(T0), FinishedAt: metav1.NewTime(T0.Add(after))}}
		}
	}
	return w
}

// AllTerminated ends every main container with the exit code and reason.
func (w *PodWrapper) AllTerminated(code int32, reason string) *PodWrapper {
	for _, c := range w.Status.ContainerStatuses {
		w.Terminated(c.Name, code, reason, time.Minute)
	}
	return w
}

// Phase sets status.phase.
func (w *PodWrapper) Phase(p corev1.PodPhase) *PodWrapper { w.Status.Phase = p; return w }

// Reason sets status.reason and status.message.
func (w *PodWrapper) Reason(reason, msg string) *PodWrapper {
	w.Status.Reason, w.Status.Message = reason, msg
	return w
}

// DisruptionTarget adds condition DisruptionTarget=True with the reason.
func (w *PodWrapper) DisruptionTarget(reason, msg string) *PodWrapper {
	w.Status.Conditions = append(w.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(T0.Add(30 * time.Second))})
	return w
}

// Deleting sets deletionTimestamp as a deletion requested at T0+at with the
// grace period would.
func (w *PodWrapper) Deleting(at time.Duration, grace int64) *PodWrapper {
	ts := metav1.NewTime(T0.Add(at).Add(time.Duration(grace) * time.Second))
	w.DeletionTimestamp = &ts
	w.DeletionGracePeriodSeconds = ptr.To(grace)
	return w
}

// Succeeded ends the pod as a success: every main container exited 0, phase
// Succeeded.
func (w *PodWrapper) Succeeded() *PodWrapper {
	return w.AllTerminated(0, "Completed").Phase(corev1.PodSucceeded)
}

// Failed ends the pod as a failure: every main container exited 1, phase
// Failed.
func (w *PodWrapper) Failed() *PodWrapper { return w.AllTerminated(1, "Error").Phase(corev1.PodFailed) }

// OOMKilled ends the pod with main killed by the OOM killer (exit 137),
// phase Failed.
func (w *PodWrapper) OOMKilled() *PodWrapper {
	return w.AllTerminated(137, "OOMKilled").Phase(corev1.PodFailed)
}

// Evicted ends the pod as the kubelet's node-pressure or ephemeral-storage
// eviction does on v1.34: phase Failed, status.reason Evicted, exit 137, no
// DisruptionTarget.
func (w *PodWrapper) Evicted() *PodWrapper {
	return w.AllTerminated(137, "Error").Phase(corev1.PodFailed).
		Reason("Evicted", "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. ")
}

// Drained ends the pod as an Eviction-API eviction does on v1.34: DisruptionTarget
// EvictionByEvictionAPI, deletionTimestamp, exit 143, phase Failed, empty
// status.reason.
func (w *PodWrapper) Drained() *PodWrapper {
	return w.DisruptionTarget("EvictionByEvictionAPI", "Eviction API: evicting").
		Deleting(30*time.Second, 30).AllTerminated(143, "Error").Phase(corev1.PodFailed)
}

// ClaimFor returns the PVC the ephemeral-volume controller creates for the
// pod's volume: named POD-VOLUME, controlled by the pod, labelled.
func ClaimFor(pod *corev1.Pod, volume string) *corev1.PersistentVolumeClaim {
	var tmpl *corev1.PersistentVolumeClaimTemplate
	for _, v := range pod.Spec.Volumes {
		if v.Name == volume && v.Ephemeral != nil {
			tmpl = v.Ephemeral.VolumeClaimTemplate
		}
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name + "-" + volume, Namespace: pod.Namespace,
			Labels: map[string]string{v1.LabelWorkVolume: volume},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
	}
	if tmpl != nil {
		pvc.Spec = *tmpl.Spec.DeepCopy()
	}
	return pvc
}

// RunWrapper builds a DeferRun.
type RunWrapper struct{ v1.DeferRun }

// MakeRun returns an armed DeferRun for pod name with one work volume and a
// stage-out policy (defaults applied), its pod on node n1 (status.nodeName,
// as recorded with the trigger).
func MakeRun(name, ns string) *RunWrapper {
	pol := v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://bucket/{namespace}/{pod}/"}}
	pol.Default()
	return &RunWrapper{v1.DeferRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("run-uid-" + name),
			Finalizers: []string{v1.DeferRunFinalizer},
			Labels:     map[string]string{v1.LabelPodName: name}},
		Spec: v1.DeferRunSpec{
			PodName: name, PodUID: types.UID("uid-" + name),
			Volumes: []v1.RetainedVolume{{Name: v1.DefaultWorkVolumeName, ClaimName: name + "-" + v1.DefaultWorkVolumeName}},
			Policy:  pol,
		},
		Status: v1.DeferRunStatus{NodeName: "n1"},
	}}
}

// Obj returns the DeferRun.
func (w *RunWrapper) Obj() *v1.DeferRun { return &w.DeferRun }

// Trigger sets status.trigger and the main container's exit.
func (w *RunWrapper) Trigger(t v1.Trigger, code int32) *RunWrapper {
	w.Status.Trigger = t
	w.Status.ExitCodes = []v1.ContainerExit{{Name: "main", ExitCode: code}}
	return w
}

// Job sets spec.jobName.
func (w *RunWrapper) Job(name string) *RunWrapper { w.Spec.JobName = name; return w }

// StageUser sets spec.stageUser.
func (w *RunWrapper) StageUser(su *v1.StageUser) *RunWrapper { w.Spec.StageUser = su; return w }

// Policy edits the policy.
func (w *RunWrapper) Policy(f func(*v1.DeferPolicySpec)) *RunWrapper { f(&w.Spec.Policy); return w }
