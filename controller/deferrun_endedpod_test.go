package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// TestDeletesEndedPod: the ended pod goes only after a complete, successful
// stage-out whose volume was released, after the triggers the policy says.
func TestDeletesEndedPod(t *testing.T) {
	done := func(trig v1.Trigger, del v1.PodDeletion, conds ...string) *v1.DeferRun {
		run := kt.MakeRun("p", "ns").Trigger(trig, 137).Policy(func(p *v1.DeferPolicySpec) { p.DeleteEndedPod = del }).Obj()
		for _, c := range conds {
			meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "R"})
		}
		return run
	}
	ok := []string{v1.DeferRunSucceeded, v1.DeferRunVolumeReleased}
	for _, tc := range []struct {
		name string
		run  *v1.DeferRun
		want bool
	}{
		{"evicted, default policy", done(v1.TriggerEvicted, "", ok...), true},
		{"evicted, OnPressure", done(v1.TriggerEvicted, v1.PodDeletionOnPressure, ok...), true},
		{"failed, OnPressure", done(v1.TriggerFailed, v1.PodDeletionOnPressure, ok...), false},
		{"failed, Always", done(v1.TriggerFailed, v1.PodDeletionAlways, ok...), true},
		{"evicted, Never", done(v1.TriggerEvicted, v1.PodDeletionNever, ok...), false},
		{"evicted, volume kept", done(v1.TriggerEvicted, v1.PodDeletionAlways, v1.DeferRunSucceeded), false},
		{"evicted, incomplete", done(v1.TriggerEvicted, v1.PodDeletionAlways, append(ok, v1.DeferRunIncomplete)...), false},
		{"evicted, run failed", done(v1.TriggerEvicted, v1.PodDeletionAlways, v1.DeferRunFailed, v1.DeferRunVolumeReleased), false},
	} {
		if got := DeletesEndedPod(tc.run); got != tc.want {
			t.Errorf("%s: DeletesEndedPod = %v, want %v", tc.name, got, tc.want)
		}
	}
}
