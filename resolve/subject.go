package resolve

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// JobSubject is what Policy decides for a Job at admission: its namespace,
// the DeferPolicy it names (its own annotation, else its pod template's),
// its labels (a ClusterDeferPolicy's jobSelector) and whether it opts out
// (kdefer.io/skip on it or its template).
func JobSubject(job *batchv1.Job) Subject {
	return Subject{Namespace: job.Namespace, Named: JobPolicyName(job), Labels: job.Labels,
		Skip: job.Annotations[v1.AnnotationSkip] == "true" || job.Spec.Template.Annotations[v1.AnnotationSkip] == "true"}
}

// JobPolicyName is the DeferPolicy a Job names: its own annotation, else
// its pod template's ("" for none).
func JobPolicyName(job *batchv1.Job) string {
	if name := job.Annotations[v1.AnnotationPolicy]; name != "" {
		return name
	}
	return job.Spec.Template.Annotations[v1.AnnotationPolicy]
}

// PodSubject is what Policy decides for a pod no Job made, at admission.
func PodSubject(pod *corev1.Pod) Subject {
	return Subject{Namespace: pod.Namespace, Named: pod.Annotations[v1.AnnotationPolicy], Labels: pod.Labels,
		Skip: pod.Annotations[v1.AnnotationSkip] == "true"}
}

// MarkJob returns a copy of job as admission arms it under applied, before
// render: a Job without kdefer's label gets it when a ClusterDeferPolicy
// selects it (armed false, and job itself, when none does), and the pod
// template's kdefer.io/cluster-policy names the ClusterDeferPolicy that
// applies, or is removed (whatever the Job's author wrote there).
func MarkJob(job *batchv1.Job, applied Applied) (out *batchv1.Job, armed bool) {
	if job.Labels[v1.LabelEnabled] != "true" && applied.Selected == "" {
		return job, false
	}
	out = job.DeepCopy()
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[v1.LabelEnabled] = "true"
	RecordCluster(&out.Spec.Template.Annotations, applied.ClusterName())
	return out, true
}

// RecordCluster writes the ClusterDeferPolicy that applies (name, "" for
// none) into annotations, where the controller reads it when it arms the
// pod (Subject.Recorded).
func RecordCluster(annotations *map[string]string, name string) {
	if name == "" {
		delete(*annotations, v1.AnnotationClusterPolicy)
		return
	}
	if *annotations == nil {
		*annotations = map[string]string{}
	}
	(*annotations)[v1.AnnotationClusterPolicy] = name
}
