package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IsDeferPodOf says whether pod is run's defer pod: owned by the run (a pod
// whose volumes were unknown, or made before defer pods were owned by their
// volumes) or annotated with its UID. It is here, beside DeferPodName, for
// everything that must recognise a defer pod: the controller, and the
// logs endpoints of the controller and the node agent.
func IsDeferPodOf(pod *corev1.Pod, run *DeferRun) bool {
	if metav1.IsControlledBy(pod, run) {
		return true
	}
	uid, ok := pod.Annotations[AnnotationDeferRunUID]
	return ok && uid == string(run.UID) && pod.Annotations[AnnotationDeferRunName] == run.Name
}

// DeferPodRun is the name of the run a defer pod serves, "" if pod is not
// a defer pod.
func DeferPodRun(pod metav1.Object) string {
	if n := pod.GetAnnotations()[AnnotationDeferRunName]; n != "" {
		return n
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && ref.Kind == "DeferRun" && ref.APIVersion == GroupVersion.String() {
		return ref.Name
	}
	return ""
}
