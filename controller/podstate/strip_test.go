package podstate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// The pods of one template share one slim copy of their containers, which
// keeps what Classify and StageUserOf read; pods whose containers differ in
// any of that get their own.
func TestStripPodSharesContainers(t *testing.T) {
	pod := func(limit string, uid int64) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "main", Image: "sim:1", Command: []string{"sim"}, SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(uid)},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}}},
			{Name: "side", Image: "side:1"},
		}}}
	}
	strip := func(p *corev1.Pod) []corev1.Container {
		t.Helper()
		out, err := StripPod(p)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*corev1.Pod).Spec.Containers
	}
	a, b := strip(pod("1Gi", 1000)), strip(pod("1Gi", 1000))
	want := []corev1.Container{
		{Name: "main", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000)},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}},
		{Name: "side"},
	}
	if !equality.Semantic.DeepEqual(a, want) {
		t.Fatalf("slim containers = %+v, want %+v", a, want)
	}
	if &a[0] != &b[0] {
		t.Error("two pods of one template hold two copies of their slim containers")
	}
	for name, other := range map[string][]corev1.Container{"memory limit": strip(pod("2Gi", 1000)), "user": strip(pod("1Gi", 1001))} {
		if &other[0] == &a[0] {
			t.Errorf("a pod with another %s shares the first pods' containers", name)
		}
	}
}
