// Package review decodes the objects of kdefer's admission requests (Jobs,
// CronJobs, pods, DeferPolicies, PVCs) and decides which Job and CronJob
// requests need a review.
// Their bytes come from whoever may create those objects, so the decoding is
// fuzzed (review_fuzz_test.go). It is apart from package webhook, and
// depends on k8s.io/api, apimachinery and kdefer's api only (no
// controller-runtime), so that the fuzz target builds without the
// controller's dependencies: a fuzz build instruments every package it
// compiles.
package review

import (
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// Job decodes the Job of req and says whether the request needs checking:
// creations, and updates that change the pod template of an opted-in Job
// (kdefer never blocks metadata or status updates, nor deletions). The
// Job's namespace is the request's when the object leaves it out.
func Job(req *admissionv1.AdmissionRequest) (*batchv1.Job, bool, error) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return nil, false, nil
	}
	job := &batchv1.Job{}
	if err := json.Unmarshal(req.Object.Raw, job); err != nil {
		return nil, false, fmt.Errorf("decode the Job: %w", err)
	}
	if job.Namespace == "" {
		job.Namespace = req.Namespace
	}
	if job.Labels[v1.LabelEnabled] != "true" || job.DeletionTimestamp != nil {
		return job, false, nil
	}
	if req.Operation == admissionv1.Update {
		old := &batchv1.Job{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return nil, false, fmt.Errorf("decode the Job before the update: %w", err)
		}
		// The template of a Job is immutable (but for some fields while it
		// is suspended): annotation changes on the Job (kdefer.io/skip,
		// summaries) must pass untouched.
		if equality.Semantic.DeepEqual(old.Spec.Template, job.Spec.Template) {
			return job, false, nil
		}
	}
	return job, true, nil
}

// CronJob decodes the CronJob of req and says whether the request needs
// checking: creations, and updates that change the jobTemplate, of a CronJob
// whose jobTemplate opts in (kdefer never blocks a suspend, a schedule change
// or a deletion). The CronJob's namespace is the request's when the object
// leaves it out.
func CronJob(req *admissionv1.AdmissionRequest) (*batchv1.CronJob, bool, error) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return nil, false, nil
	}
	cj := &batchv1.CronJob{}
	if err := json.Unmarshal(req.Object.Raw, cj); err != nil {
		return nil, false, fmt.Errorf("decode the CronJob: %w", err)
	}
	if cj.Namespace == "" {
		cj.Namespace = req.Namespace
	}
	if cj.Spec.JobTemplate.Labels[v1.LabelEnabled] != "true" || cj.DeletionTimestamp != nil {
		return cj, false, nil
	}
	if req.Operation == admissionv1.Update {
		old := &batchv1.CronJob{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return nil, false, fmt.Errorf("decode the CronJob before the update: %w", err)
		}
		if equality.Semantic.DeepEqual(old.Spec.JobTemplate, cj.Spec.JobTemplate) {
			return cj, false, nil
		}
	}
	return cj, true, nil
}

// PlatformCandidate reports a creation of a Job without kdefer's label,
// which a ClusterDeferPolicy may arm (whether one selects it is the
// caller's question): only such Jobs reach kdefer without the label,
// through the webhook that selects the namespaces the policies label.
func PlatformCandidate(req *admissionv1.AdmissionRequest, job *batchv1.Job) bool {
	return req.Operation == admissionv1.Create && job != nil && job.Labels[v1.LabelEnabled] != "true" && job.DeletionTimestamp == nil
}

// LabelAdded reports an update that opts an existing, unrendered Job in.
func LabelAdded(req *admissionv1.AdmissionRequest, job *batchv1.Job) bool {
	if req.Operation != admissionv1.Update || job == nil || job.Labels[v1.LabelEnabled] != "true" {
		return false
	}
	old := &batchv1.Job{}
	if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
		return false
	}
	return old.Labels[v1.LabelEnabled] != "true" && job.Spec.Template.Annotations[v1.AnnotationRendered] == ""
}

// Pod decodes the pod of req.
func Pod(req *admissionv1.AdmissionRequest) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		return nil, fmt.Errorf("decode the pod: %w", err)
	}
	return pod, nil
}

// Policy decodes the DeferPolicy of req.
func Policy(req *admissionv1.AdmissionRequest) (*v1.DeferPolicy, error) {
	p := &v1.DeferPolicy{}
	if err := json.Unmarshal(req.Object.Raw, p); err != nil {
		return nil, fmt.Errorf("decode the DeferPolicy: %w", err)
	}
	return p, nil
}

// PVC decodes the PersistentVolumeClaim of req.
func PVC(req *admissionv1.AdmissionRequest) (*corev1.PersistentVolumeClaim, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := json.Unmarshal(req.Object.Raw, pvc); err != nil {
		return nil, fmt.Errorf("decode the PersistentVolumeClaim: %w", err)
	}
	return pvc, nil
}

// Name names the object of req for logs: its name, or its generateName
// followed by "*" while the API server has not chosen one; a malformed
// object only leaves the name empty.
func Name(req *admissionv1.AdmissionRequest) string {
	if req.Name != "" {
		return req.Name
	}
	var m struct {
		Metadata struct{ Name, GenerateName string } `json:"metadata"`
	}
	_ = json.Unmarshal(req.Object.Raw, &m)
	if m.Metadata.Name != "" {
		return m.Metadata.Name
	}
	return m.Metadata.GenerateName + "*"
}

// ClusterPolicy decodes the ClusterDeferPolicy of req.
func ClusterPolicy(req *admissionv1.AdmissionRequest) (*v1.ClusterDeferPolicy, error) {
	p := &v1.ClusterDeferPolicy{}
	if err := json.Unmarshal(req.Object.Raw, p); err != nil {
		return nil, fmt.Errorf("decode the ClusterDeferPolicy: %w", err)
	}
	return p, nil
}

// Namespace decodes the Namespace of req.
func Namespace(req *admissionv1.AdmissionRequest) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	if err := json.Unmarshal(req.Object.Raw, ns); err != nil {
		return nil, fmt.Errorf("decode the Namespace: %w", err)
	}
	return ns, nil
}
