package envtest_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kdefer/kdefer/controller"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/test/envtest"
)

// TestPrePullPodRequestsNothing: the apiserver's LimitRanger and
// ResourceQuota admission, in a namespace with a LimitRange that defaults
// CPU and memory requests and a ResourceQuota on requests and memory
// limits, admit a pre-pull pod and leave its requests at zero: what lets
// the kubelet admit it on a node whose CPU requests are full (issue #37).
func TestPrePullPodRequestsNothing(t *testing.T) {
	env := envtest.Start(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "quota"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse
	lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: ns.Name}, Spec: corev1.LimitRangeSpec{
		Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("32Mi")},
			Default:        corev1.ResourceList{corev1.ResourceCPU: q("200m"), corev1.ResourceMemory: q("128Mi")}}}}}
	if err := env.Client.Create(ctx, lr); err != nil {
		t.Fatal(err)
	}
	hard := corev1.ResourceList{corev1.ResourceRequestsCPU: q("1"), corev1.ResourceRequestsMemory: q("1Gi"), corev1.ResourceLimitsMemory: q("1Gi")}
	rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "compute", Namespace: ns.Name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	if err := env.Client.Create(ctx, rq); err != nil {
		t.Fatal(err)
	}
	// Quota admission enforces status.hard, which the quota controller
	// (not running here) would set.
	rq.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{
		corev1.ResourceRequestsCPU: q("0"), corev1.ResourceRequestsMemory: q("0"), corev1.ResourceLimitsMemory: q("0")}}
	if err := env.Client.Status().Update(ctx, rq); err != nil {
		t.Fatal(err)
	}
	// A pod that leaves its requests out gets the LimitRange's (the
	// defaults are in force), and passes the quota with them.
	plain := controller.BuildPrePullPod(kt.MakeRun("plain", ns.Name).Obj(), "n1", "kdefer.io/kdefer-stage:test", "")
	plain.Name = "left-out"
	plain.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	if err := env.Client.Create(ctx, plain); err != nil {
		t.Fatalf("a pod without requests: %v", err)
	}
	if r := plain.Spec.Containers[0].Resources.Requests.Cpu(); r.Cmp(q("100m")) != 0 {
		t.Fatalf("a pod without requests got CPU request %s, want the LimitRange's 100m (are its defaults in force?)", r)
	}
	pod := controller.BuildPrePullPod(kt.MakeRun("pull", ns.Name).Obj(), "n1", "kdefer.io/kdefer-stage:test", "")
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatalf("pre-pull pod in a namespace with a LimitRange and a ResourceQuota: %v", err)
	}
	for _, c := range pod.Spec.Containers {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if v, ok := c.Resources.Requests[r]; !ok || !v.IsZero() {
				t.Errorf("pre-pull container %s: %s request %v (set %v), want an explicit zero", c.Name, r, v.String(), ok)
			}
		}
	}
}
