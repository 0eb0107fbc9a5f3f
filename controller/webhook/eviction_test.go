package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Which pod states the guard protects at all; whether a pod is a defer pod
// is deferRunOf's, tested against a real apiserver (test/envtest).
func TestEvictionGuarded(t *testing.T) {
	pod := func(phase corev1.PodPhase, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-defer", Namespace: "ns"}, Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	cases := map[string]struct {
		pod     *corev1.Pod
		guarded bool
	}{
		"pulling or staging out (Pending)":    {pod: pod(corev1.PodPending, false), guarded: true},
		"just created (no phase yet)":         {pod: pod("", false), guarded: true},
		"running its last step: its budget's": {pod: pod(corev1.PodRunning, false)},
		"succeeded":                           {pod: pod(corev1.PodSucceeded, false)},
		"failed":                              {pod: pod(corev1.PodFailed, false)},
		"already being deleted":               {pod: pod(corev1.PodPending, true)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.guarded, evictionGuarded(tc.pod)); diff != "" {
				t.Errorf("guarded (-want +got): %s", diff)
			}
		})
	}
}
