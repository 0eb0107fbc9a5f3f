package render

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// Pod returns a rendered copy of a pod that no rendered template made: a
// bare pod, or one whose owner kdefer does not render (a CI runner's pod, a
// Tekton TaskRun's, a Jenkins agent). The pod's own kdefer.io annotations
// configure it, as a Job's do its pods. It is rendered as it is created, when
// its spec is still the creator's to change: the work volume becomes a
// generic ephemeral volume (its PVC is made after the pod, by the
// ephemeral-volume controller, as for a Job's pod), and the finalizer is in
// the pod from its first write. The error lists every problem found.
func Pod(pod *corev1.Pod, policy *v1.DeferPolicySpec, opts Options) (*corev1.Pod, error) {
	out := pod.DeepCopy()
	tmpl := corev1.PodTemplateSpec{ObjectMeta: out.ObjectMeta, Spec: out.Spec}
	var errs []error
	if err := podTemplate(nil, &tmpl, policy, opts, "spec"); err != nil {
		errs = append(errs, err)
	}
	if pod.Spec.RestartPolicy == corev1.RestartPolicyAlways || pod.Spec.RestartPolicy == "" {
		// A pod that restarts its containers never ends on its own: every
		// rollout or scale-down would be held by the finalizer for a defer
		// run nobody asked for.
		errs = append(errs, &TemplateError{Field: "spec.restartPolicy", Problem: fmt.Sprintf("is %q: the pod's containers are restarted forever, so it never ends on its own (kdefer serves batch pods)", restartPolicyOrDefault(pod)),
			Fix: "set restartPolicy: Never (or OnFailure), as CI runners' and Jobs' pods have, or remove label " + v1.LabelEnabled})
	}
	_, indexed := pod.Annotations[JobCompletionIndexAnnotation]
	errs = append(errs, ownerPlaceholders(mergedConfig(nil, pod.Annotations), podOwner(jobControllerOf(pod) != nil, indexed))...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out.ObjectMeta, out.Spec = tmpl.ObjectMeta, tmpl.Spec
	return out, nil
}

// PodWarnings returns advice about a pod that render accepts: unknown
// kdefer.io annotations (likely typos).
func PodWarnings(pod *corev1.Pod) []string {
	return v1.UnknownAnnotations(pod.Annotations)
}

// IsRenderedPod reports whether pod was rendered, by Pod or from a rendered
// Job's template: either way it is kdefer's as it is.
func IsRenderedPod(pod *corev1.Pod) bool {
	return pod.Annotations[v1.AnnotationRendered] != ""
}

func restartPolicyOrDefault(pod *corev1.Pod) corev1.RestartPolicy {
	if pod.Spec.RestartPolicy == "" {
		return corev1.RestartPolicyAlways
	}
	return pod.Spec.RestartPolicy
}

// jobControllerOf returns the pod's controller reference if it is a batch
// Job, else nil.
func jobControllerOf(pod *corev1.Pod) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "Job" || !strings.HasPrefix(ref.APIVersion, "batch/") {
		return nil
	}
	return ref
}

// placeholderOwner is what the object that owns a stage URL can fill in:
// {job} needs a Job, {index} an Indexed Job's pod. Either would otherwise
// expand to "" and every pod would write under one prefix.
type placeholderOwner struct {
	hasJob, indexed bool
	// noJob and noIndex are the problem and fix when the placeholder
	// cannot be filled.
	noJob, noIndex [2]string
}

func jobOwner(indexed bool) placeholderOwner {
	return placeholderOwner{hasJob: true, indexed: indexed,
		noIndex: [2]string{"uses {index}, but the Job is not Indexed", "set spec.completionMode: Indexed, or use {pod} instead of {index}"}}
}

func podOwner(hasJob, indexed bool) placeholderOwner {
	return placeholderOwner{hasJob: hasJob, indexed: indexed,
		noJob:   [2]string{"uses {job}, but the pod belongs to no Job, so it would be empty", "use {pod} or {uid} instead of {job}"},
		noIndex: [2]string{"uses {index}, but the pod is not a pod of an Indexed Job", "use {pod} or {uid} instead of {index}"}}
}

// ownerPlaceholders refuses the stage URLs in ann that use a placeholder
// their owner cannot fill.
func ownerPlaceholders(ann map[string]string, o placeholderOwner) []error {
	var errs []error
	for _, k := range []string{v1.AnnotationStageOut, v1.AnnotationStageIn} {
		for _, c := range []struct {
			placeholder string
			ok          bool
			why         [2]string
		}{{"{job}", o.hasJob, o.noJob}, {"{index}", o.indexed, o.noIndex}} {
			if !c.ok && strings.Contains(ann[k], c.placeholder) {
				errs = append(errs, &v1.AnnotationError{Key: k, Value: ann[k], Problem: c.why[0], Fix: c.why[1]})
			}
		}
	}
	return errs
}
