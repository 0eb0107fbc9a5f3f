package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// podRequest is what the kubelet's admission counts for a pod, per
// resource: the larger of any init container's request and the sum of the
// main containers' (no sidecars or overhead in a defer pod).
func podRequest(p *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range p.Spec.Containers {
		for name, q := range c.Resources.Requests {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	for _, c := range p.Spec.InitContainers {
		for name, q := range c.Resources.Requests {
			if cur := out[name]; q.Cmp(cur) > 0 {
				out[name] = q
			}
		}
	}
	return out
}

// admits is the kubelet's resource check of a pod bound to its node
// (noderesources.Fits, which the kubelet's admission runs): a resource is
// insufficient when the pod requests some of it (> 0) and more than the
// node's allocatable minus what its running pods request. It returns the
// insufficient resources, which are also the only ones the kubelet's
// critical-pod admission would evict running pods to free.
func admits(allocatable, requested, pod corev1.ResourceList) []corev1.ResourceName {
	var short []corev1.ResourceName
	for _, name := range requestedResources {
		want := pod[name]
		if want.Sign() <= 0 {
			continue
		}
		free := allocatable[name].DeepCopy()
		free.Sub(requested[name])
		if want.Cmp(free) > 0 {
			short = append(short, name)
		}
	}
	return short
}

func notBestEffort(p *corev1.Pod) bool {
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
			for _, q := range rl {
				if q.Sign() > 0 {
					return true
				}
			}
		}
	}
	return false
}

// TestDeferPodRequestsNothing: every container of a defer pod requests
// zero CPU, memory and ephemeral storage, explicitly (an absent request
// would default to the limit), while the limits stay, so the pod is
// Burstable, not BestEffort.
func TestDeferPodRequestsNothing(t *testing.T) {
	greedy := corev1.Container{Name: "greedy", Image: "x", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("2Gi")}}}
	for name, run := range map[string]*v1.DeferRun{
		"stage-out only":          kt.MakeRun("p", "ns").Trigger(v1.TriggerEvicted, 137).Obj(),
		"stage-out and a request": kt.MakeRun("p", "ns").Trigger(v1.TriggerEvicted, 137).Policy(func(p *v1.DeferPolicySpec) { p.DeferContainers = []corev1.Container{greedy} }).Obj(),
		"defer container only": kt.MakeRun("p", "ns").Trigger(v1.TriggerEvicted, 137).Policy(func(p *v1.DeferPolicySpec) {
			p.StageOut = nil
			p.DeferContainers = []corev1.Container{greedy}
		}).Obj(),
	} {
		pod := BuildDeferPod(run, DeferPodOptions{StageImage: "img"})
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			for _, r := range requestedResources {
				q, ok := c.Resources.Requests[r]
				if !ok || !q.IsZero() {
					t.Errorf("%s: step %s requests %s %v (set: %v), want an explicit 0", name, c.Name, r, q.String(), ok)
				}
			}
			if c.Name == greedy.Name && !c.Resources.Limits.Memory().Equal(resource.MustParse("2Gi")) {
				t.Errorf("%s: step %s limits %v, want the policy's kept", name, c.Name, c.Resources.Limits)
			}
		}
		if !notBestEffort(pod) {
			t.Errorf("%s: defer pod is BestEffort; the kubelet refuses those under MemoryPressure", name)
		}
	}
}

// TestDeferPodBurstAdmitted: 40 defer pods bound to a 2-core node whose
// running pods request every core and every byte of memory are all
// admitted, and none of them gives the kubelet's critical-pod admission a
// resource to free by evicting running work. With the 50m/64Mi requests
// defer pods had before, each is refused once the node is fully requested
// (issue #14: 2 of 40 refused OutOfcpu when 38 defer pods had filled it).
func TestDeferPodBurstAdmitted(t *testing.T) {
	allocatable := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("20Gi")}
	requested := allocatable.DeepCopy() // running pods request it all
	for i := range 40 {
		run := kt.MakeRun("p", "ns").Trigger(v1.TriggerEvicted, 137).Obj()
		pod := BuildDeferPod(run, DeferPodOptions{StageImage: "img", PriorityClassName: DefaultDeferPriorityClass})
		req := podRequest(pod)
		if short := admits(allocatable, requested, req); len(short) > 0 {
			t.Fatalf("defer pod %d of 40 refused Out of %v (requests %v)", i+1, short, req)
		}
		for name, q := range req {
			sum := requested[name]
			sum.Add(q)
			requested[name] = sum
		}
	}
	// The model refuses what the kubelet refuses: the old requests.
	old := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	if short := admits(allocatable, allocatable, old); len(short) != 2 {
		t.Fatalf("a 50m/64Mi pod on a full node: short of %v, want cpu and memory", short)
	}
}

// TestDeferPodPriority: the policy's priority class, else the manager's
// (system-node-critical by default), else none.
func TestDeferPodPriority(t *testing.T) {
	named := kt.MakeRun("p", "ns").Trigger(v1.TriggerEvicted, 137).Policy(func(p *v1.DeferPolicySpec) { p.PriorityClassName = "batch-low" }).Obj()
	plain := kt.MakeRun("p", "ns").Trigger(v1.TriggerEvicted, 137).Obj()
	for _, tc := range []struct {
		run     *v1.DeferRun
		manager string
		want    string
	}{
		{plain, DefaultDeferPriorityClass, "system-node-critical"},
		{named, DefaultDeferPriorityClass, "batch-low"},
		{plain, "", ""},
	} {
		if got := BuildDeferPod(tc.run, DeferPodOptions{StageImage: "img", PriorityClassName: tc.manager}).Spec.PriorityClassName; got != tc.want {
			t.Errorf("policy %q, manager %q: priority class %q, want %q", tc.run.Spec.Policy.PriorityClassName, tc.manager, got, tc.want)
		}
	}
}
