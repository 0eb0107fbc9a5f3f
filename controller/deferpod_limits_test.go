package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// A user defer container runs at a critical priority: one that sets no
// limits gets the default ones, each resource alone, with a request of zero
// (not the limit the apiserver would default it to); limits and requests
// it sets are its own.
func TestDeferContainerDefaultLimits(t *testing.T) {
	run := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
		p.DeferContainers = []corev1.Container{
			{Name: "bare", Image: "busybox"},
			{Name: "own", Image: "busybox", Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}},
		}
	}).Obj()
	opts := DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:test"}
	got := map[string]corev1.ResourceRequirements{}
	for _, s := range Steps(run, opts) {
		got[s.Name] = s.Container.Resources
	}
	q := func(r corev1.ResourceList, n corev1.ResourceName) string {
		v, ok := r[n]
		if !ok {
			return "unset"
		}
		return v.String()
	}
	for _, tc := range []struct {
		step, res              corev1.ResourceName
		wantLimit, wantRequest string
	}{
		{"bare", corev1.ResourceMemory, "512Mi", "0"},
		{"bare", corev1.ResourceCPU, "1", "0"},
		{"own", corev1.ResourceMemory, "2Gi", "unset"}, // its own limit: the apiserver defaults the request to it, its choice
		{"own", corev1.ResourceCPU, "1", "100m"},
	} {
		r := got[string(tc.step)]
		if l, req := q(r.Limits, tc.res), q(r.Requests, tc.res); l != tc.wantLimit || req != tc.wantRequest {
			t.Errorf("%s %s: limit %s request %s, want %s and %s", tc.step, tc.res, l, req, tc.wantLimit, tc.wantRequest)
		}
	}
	opts.DeferContainerLimits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
	for _, s := range Steps(run, opts) {
		if s.Name == "bare" {
			if l := q(s.Container.Resources.Limits, corev1.ResourceMemory); l != "128Mi" {
				t.Errorf("with --defer-container-memory-limit 128Mi: %s", l)
			}
			if l := q(s.Container.Resources.Limits, corev1.ResourceCPU); l != "unset" {
				t.Errorf("cpu limit %s, want none when only memory is given", l)
			}
		}
	}
}
