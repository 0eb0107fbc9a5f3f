package controller

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// Annotations the controller keeps on DeferRuns for itself.
const (
	// annotationConfigError holds why the policy could not be resolved when
	// the run was armed; the run re-resolves it before it starts and
	// proceeds once the cause is fixed.
	annotationConfigError = "kdefer.io/config-error"
	// labelJobUID tells runs of a re-created Job of the same name apart.
	labelJobUID = "kdefer.io/job-uid"
)

// setCondition sets a condition with the run's generation; it keeps the
// transition time when the status does not change.
func setCondition(st *v1.DeferRunStatus, gen int64, typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: truncate(msg, 1024), ObservedGeneration: gen})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
