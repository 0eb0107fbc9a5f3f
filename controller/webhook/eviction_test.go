package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

func TestRefuseEviction(t *testing.T) {
	pod := func(managed string, phase corev1.PodPhase, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-defer", Namespace: "ns",
			Labels: map[string]string{v1.LabelManaged: managed, v1.LabelDeferRun: "p"}},
			Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	cases := map[string]struct {
		pod    *corev1.Pod
		refuse bool
	}{
		"defer pod pulling or staging out (Pending)":    {pod: pod(v1.ManagedDeferPod, corev1.PodPending, false), refuse: true},
		"defer pod running its last step: its budget's": {pod: pod(v1.ManagedDeferPod, corev1.PodRunning, false)},
		"defer pod just created (no phase yet)":         {pod: pod(v1.ManagedDeferPod, "", false), refuse: true},
		"defer pod succeeded":                           {pod: pod(v1.ManagedDeferPod, corev1.PodSucceeded, false)},
		"defer pod failed":                              {pod: pod(v1.ManagedDeferPod, corev1.PodFailed, false)},
		"defer pod already being deleted":               {pod: pod(v1.ManagedDeferPod, corev1.PodRunning, true)},
		"a managed Job pod":                             {pod: pod("true", corev1.PodRunning, false)},
		"an unmanaged pod named like a defer pod":       {pod: pod("", corev1.PodPending, false)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			msg := refuseEviction(tc.pod)
			if diff := cmp.Diff(tc.refuse, msg != ""); diff != "" {
				t.Errorf("refused (-want +got): %s (message %q)", diff, msg)
			}
		})
	}
}
