package controller

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

// With logs on, the stage-out step archives its own log, and defer
// containers after it get the stage-logs sidecar, which has the stage
// step's endpoint, token and credentials but no work volume; the defer
// containers never mount the token.
func TestDeferPodLogs(t *testing.T) {
	opts := DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:test",
		Logs: LogsEndpoint{URL: "https://kdefer-webhook.kdefer-system.svc" + stagecontract.LogsPath, CA: func() []byte { return []byte("CA") }}}
	envOf := func(c *corev1.Container, name string) string {
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}
	names := func(cs []corev1.Container) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}

	run := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
		p.DeferContainers = []corev1.Container{{Name: "notify", Image: "curl"}, {Name: "last", Image: "busybox"}}
		p.Credentials = &corev1.LocalObjectReference{Name: "s3"}
	}).Obj()
	pod := BuildDeferPod(run, opts)
	if got, want := names(pod.Spec.InitContainers), []string{v1.StageOutStepName, v1.StageLogsName, "notify"}; !slices.Equal(got, want) {
		t.Fatalf("init containers %v, want %v", got, want)
	}
	if got := names(pod.Spec.Containers); !slices.Equal(got, []string{"last"}) {
		t.Errorf("main containers %v, want the last defer container alone (the pod runs, under its budget, while it does)", got)
	}
	stage, side := &pod.Spec.InitContainers[0], &pod.Spec.InitContainers[1]
	if envOf(stage, stagecontract.EnvLogsSelf) != "p-defer/"+v1.StageOutStepName {
		t.Errorf("stage-out env %s = %q", stagecontract.EnvLogsSelf, envOf(stage, stagecontract.EnvLogsSelf))
	}
	if side.RestartPolicy == nil || *side.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("stage-logs is not a sidecar: the pod would wait for it before the defer containers")
	}
	if want := []string{"logs", "--to", "s3://bucket/{namespace}/{pod}/", "--log-format", "json"}; !slices.Equal(side.Args, want) {
		t.Errorf("stage-logs args %v, want %v", side.Args, want)
	}
	if envOf(side, stagecontract.EnvLogsSelf) != "p-defer/"+v1.StageLogsName || envOf(side, stagecontract.EnvLogsURL) != opts.Logs.URL ||
		len(side.EnvFrom) != 1 || side.EnvFrom[0].SecretRef.Name != "s3" {
		t.Errorf("stage-logs env %+v, envFrom %+v: want the endpoint, its own log's name and the credentials", side.Env, side.EnvFrom)
	}
	for _, e := range side.Env {
		if f := e.ValueFrom; f != nil && f.ResourceFieldRef != nil && f.ResourceFieldRef.ContainerName != v1.StageLogsName {
			t.Errorf("stage-logs env %s refers to container %s", e.Name, f.ResourceFieldRef.ContainerName)
		}
	}
	var mounts []string
	for _, m := range side.VolumeMounts {
		mounts = append(mounts, m.Name)
	}
	if !slices.Equal(mounts, []string{v1.LogsTokenVolume}) {
		t.Errorf("stage-logs mounts %v, want the token alone", mounts)
	}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers[2:]), pod.Spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if m.Name == v1.LogsTokenVolume {
				t.Errorf("defer container %s mounts the logs token", c.Name)
			}
		}
		if envOf(&c, stagecontract.EnvLogsURL) != "" {
			t.Errorf("defer container %s knows the logs endpoint", c.Name)
		}
	}
	// The steps the run records are the stage-out and defer containers.
	if o := Observe(pod, 3); len(o.Steps) != 3 || slices.ContainsFunc(o.Steps, func(s v1.StepStatus) bool { return s.Name == v1.StageLogsName }) {
		t.Errorf("steps %+v: the sidecar is no step", o.Steps)
	}

	// Stage-out alone archives its own log: no sidecar.
	alone := BuildDeferPod(kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Obj(), opts)
	if len(alone.Spec.InitContainers) != 0 || envOf(&alone.Spec.Containers[0], stagecontract.EnvLogsSelf) != "p-defer/"+v1.StageOutStepName {
		t.Errorf("stage-out alone: inits %v, env %+v", names(alone.Spec.InitContainers), alone.Spec.Containers[0].Env)
	}
	// Logs off: neither.
	off := BuildDeferPod(kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
		p.DeferContainers = []corev1.Container{{Name: "last", Image: "busybox"}}
		p.StageOut.Logs = &v1.StageOutLogs{Enabled: ptr.To(false)}
	}).Obj(), opts)
	if got := names(off.Spec.InitContainers); !slices.Equal(got, []string{v1.StageOutStepName}) || envOf(&off.Spec.InitContainers[0], stagecontract.EnvLogsSelf) != "" {
		t.Errorf("logs off: inits %v, stage env %+v", got, off.Spec.InitContainers[0].Env)
	}
}

// With the node agent, the stage step and the stage-logs sidecar reach it
// on their own node's address: KDEFER_NODE_IP (status.hostIP) is defined
// before the URL that names it (Kubernetes expands $(VAR) from earlier
// variables only), and the certificate's name is given, since an address
// is no name the agent's certificate can have.
func TestDeferPodLogsNodeAgent(t *testing.T) {
	opts := DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:test",
		Logs: LogsEndpoint{URL: NodeAgentURL(9445), ServerName: "kdefer-node.kdefer-node.svc", CA: func() []byte { return []byte("CA") }}}
	run := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
		p.DeferContainers = []corev1.Container{{Name: "notify", Image: "curl"}}
	}).Obj()
	pod := BuildDeferPod(run, opts)
	for _, c := range pod.Spec.InitContainers[:2] {
		idx := map[string]int{}
		for i, e := range c.Env {
			idx[e.Name] = i
		}
		ip, ok := idx[stagecontract.EnvNodeIP]
		if !ok || c.Env[ip].ValueFrom == nil || c.Env[ip].ValueFrom.FieldRef == nil || c.Env[ip].ValueFrom.FieldRef.FieldPath != "status.hostIP" {
			t.Fatalf("%s: %s not from status.hostIP: %+v", c.Name, stagecontract.EnvNodeIP, c.Env)
		}
		u, ok := idx[stagecontract.EnvLogsURL]
		if !ok || u < ip || c.Env[u].Value != "https://$(KDEFER_NODE_IP):9445"+stagecontract.LogsPath {
			t.Errorf("%s: %s at %d (node IP at %d) = %q", c.Name, stagecontract.EnvLogsURL, u, ip, c.Env[u].Value)
		}
		if n, ok := idx[stagecontract.EnvLogsServerName]; !ok || c.Env[n].Value != "kdefer-node.kdefer-node.svc" {
			t.Errorf("%s: no %s", c.Name, stagecontract.EnvLogsServerName)
		}
	}
	for _, c := range pod.Spec.InitContainers[2:] {
		for _, e := range c.Env {
			if e.Name == stagecontract.EnvLogsURL || e.Name == stagecontract.EnvNodeIP {
				t.Errorf("defer container %s has %s", c.Name, e.Name)
			}
		}
	}
}
