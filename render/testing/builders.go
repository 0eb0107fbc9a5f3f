// Package testing holds object builders for kdefer's tests: Jobs and
// DeferPolicies as users write them, e.g.
//
//	MakeJob("sim", "default").Annotation(v1.AnnotationStageOut, "s3://b/{pod}/").Obj()
//
// It is the one builder of these types: the controller's tests use it too
// (package controller/testing builds only what the controller adds: pods,
// claims, runs). It holds builders only, no assertions or fakes, is imported
// by tests alone, and must not import anything above render.
package testing

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// JobWrapper builds a batch/v1 Job.
type JobWrapper struct{ batchv1.Job }

// MakeJob returns a one-container Job opted in to kdefer, as a user writes it.
func MakeJob(name, ns string) *JobWrapper {
	return &JobWrapper{batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{v1.LabelEnabled: "true"}},
		Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "main", Image: "busybox:1.36", Command: []string{"sh", "-c", "echo hi"}}},
				},
			},
		},
	}}
}

// Obj returns a copy of the built Job.
func (w *JobWrapper) Obj() *batchv1.Job { return w.Job.DeepCopy() }

// Label sets a label on the Job.
func (w *JobWrapper) Label(k, v string) *JobWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[k] = v
	return w
}

// NoLabel removes a label from the Job.
func (w *JobWrapper) NoLabel(k string) *JobWrapper { delete(w.Labels, k); return w }

// Annotation sets an annotation on the Job.
func (w *JobWrapper) Annotation(k, v string) *JobWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
	return w
}

// TemplateAnnotation sets an annotation on the pod template.
func (w *JobWrapper) TemplateAnnotation(k, v string) *JobWrapper {
	t := &w.Spec.Template
	if t.Annotations == nil {
		t.Annotations = map[string]string{}
	}
	t.Annotations[k] = v
	return w
}

// TemplateLabel sets a label on the pod template.
func (w *JobWrapper) TemplateLabel(k, v string) *JobWrapper {
	t := &w.Spec.Template
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Labels[k] = v
	return w
}

// StageOut sets kdefer.io/stage-out.
func (w *JobWrapper) StageOut(url string) *JobWrapper {
	return w.Annotation(v1.AnnotationStageOut, url)
}

// Indexed makes it an Indexed Job of n completions and parallelism p.
func (w *JobWrapper) Indexed(n, p int32) *JobWrapper {
	m := batchv1.IndexedCompletion
	w.Spec.CompletionMode = &m
	w.Spec.Completions = &n
	w.Spec.Parallelism = &p
	return w
}

// Parallelism sets spec.parallelism and spec.completions.
func (w *JobWrapper) Parallelism(p, completions int32) *JobWrapper {
	w.Spec.Parallelism = &p
	w.Spec.Completions = &completions
	return w
}

// UID sets metadata.uid (a fake client does not set one).
func (w *JobWrapper) UID(uid types.UID) *JobWrapper { w.ObjectMeta.UID = uid; return w }

// DeadlineExceeded adds the Job's Failed condition with reason
// DeadlineExceeded, as the Job controller sets it.
func (w *JobWrapper) DeadlineExceeded() *JobWrapper {
	w.Status.Conditions = append(w.Status.Conditions, batchv1.JobCondition{
		Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded})
	return w
}

// Suspend sets spec.suspend.
func (w *JobWrapper) Suspend(s bool) *JobWrapper { w.Spec.Suspend = &s; return w }

// SuspendedCondition sets the condition the Job controller writes when it
// suspends (status True) or resumes (False) the Job, changed at at.
func (w *JobWrapper) SuspendedCondition(status corev1.ConditionStatus, at time.Time) *JobWrapper {
	reason := "JobSuspended"
	if status != corev1.ConditionTrue {
		reason = "JobResumed"
	}
	w.Status.Conditions = append(w.Status.Conditions, batchv1.JobCondition{
		Type: batchv1.JobSuspended, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(at)})
	return w
}

// PodFailurePolicy sets spec.podFailurePolicy.
func (w *JobWrapper) PodFailurePolicy(p *batchv1.PodFailurePolicy) *JobWrapper {
	w.Spec.PodFailurePolicy = p
	return w
}

// Container appends a main container.
func (w *JobWrapper) Container(c corev1.Container) *JobWrapper {
	w.Spec.Template.Spec.Containers = append(w.Spec.Template.Spec.Containers, c)
	return w
}

// InitContainer appends an init container (a native sidecar when its
// restartPolicy is Always).
func (w *JobWrapper) InitContainer(c corev1.Container) *JobWrapper {
	w.Spec.Template.Spec.InitContainers = append(w.Spec.Template.Spec.InitContainers, c)
	return w
}

// Volume appends a pod volume.
func (w *JobWrapper) Volume(v corev1.Volume) *JobWrapper {
	w.Spec.Template.Spec.Volumes = append(w.Spec.Template.Spec.Volumes, v)
	return w
}

// EmptyDir appends an emptyDir volume mounted at mountPath in the first
// main container.
func (w *JobWrapper) EmptyDir(name, mountPath string) *JobWrapper {
	w.Volume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	return w.Mount(0, name, mountPath)
}

// Mount mounts a volume in main container i.
func (w *JobWrapper) Mount(i int, name, mountPath string) *JobWrapper {
	c := &w.Spec.Template.Spec.Containers[i]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: mountPath})
	return w
}

// EnvFromSecret gives main container i every key of a Secret.
func (w *JobWrapper) EnvFromSecret(i int, secret string) *JobWrapper {
	c := &w.Spec.Template.Spec.Containers[i]
	c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: secret}}})
	return w
}

// PolicyWrapper builds a DeferPolicy.
type PolicyWrapper struct{ v1.DeferPolicy }

// MakePolicy returns a DeferPolicy that uploads to url.
func MakePolicy(name, ns, url string) *PolicyWrapper {
	return &PolicyWrapper{v1.DeferPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "DeferPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: url}},
	}}
}

// Obj returns a copy of the built DeferPolicy.
func (w *PolicyWrapper) Obj() *v1.DeferPolicy { return w.DeferPolicy.DeepCopy() }

// Credentials sets spec.credentials.
func (w *PolicyWrapper) Credentials(secret string) *PolicyWrapper {
	w.Spec.Credentials = &corev1.LocalObjectReference{Name: secret}
	return w
}

// StageIn appends a stage-in source.
func (w *PolicyWrapper) StageIn(url, path string) *PolicyWrapper {
	w.Spec.StageIn = append(w.Spec.StageIn, v1.StageIn{URL: url, Path: path})
	return w
}

// WorkVolume sets the work volume's name, mount path and size.
func (w *PolicyWrapper) WorkVolume(name, mountPath, size string) *PolicyWrapper {
	w.Spec.WorkVolume.Name = name
	w.Spec.WorkVolume.MountPath = mountPath
	if size != "" {
		q := resource.MustParse(size)
		w.Spec.WorkVolume.Size = &q
	}
	return w
}

// TriggerRule appends a trigger rule.
func (w *PolicyWrapper) TriggerRule(r v1.TriggerRule) *PolicyWrapper {
	w.Spec.TriggerRules = append(w.Spec.TriggerRules, r)
	return w
}

// DeferContainer appends a defer container.
func (w *PolicyWrapper) DeferContainer(c corev1.Container) *PolicyWrapper {
	w.Spec.DeferContainers = append(w.Spec.DeferContainers, c)
	return w
}

// NamespaceDefault makes the policy its namespace's default.
func (w *PolicyWrapper) NamespaceDefault() *PolicyWrapper {
	w.Spec.NamespaceDefault = true
	return w
}

// Locked sets spec.locked.
func (w *PolicyWrapper) Locked(fields ...v1.LockedField) *PolicyWrapper {
	w.Spec.Locked = fields
	return w
}
