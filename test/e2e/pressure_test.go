//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// The node itself under pressure: the local cluster's node file system (the
// kubelet's root dir and the local PVs) is a small loop-mounted image
// (test/cluster/cluster.sh), so a pod can fill it past the kubelet's
// nodefs.available threshold.

// pressureMargin is how far the Job's pod takes the node's file system
// below the eviction threshold, and how far above it the node stays once the
// kubelet has evicted the pod and freed its scratch emptyDir.
const pressureMargin = 64 << 20

// TestDiskPressure: a Job's pod fills its work volume and a scratch emptyDir
// on the node's file system past the kubelet's hard threshold; the node
// reports DiskPressure and the kubelet evicts the pod (grace 0). While the
// node still reports DiskPressure, when the kubelet admits only critical
// pods, the defer pod (system-node-critical) is admitted and stages the
// outputs out; the volume is released, the disk freed, and DiskPressure
// clears.
//
// The work volume alone leaves the node just above the threshold: a
// retained volume that kept the node under it would make the kubelet evict
// another pod every time the last one is cleaned up (seconds), lowest
// priority first, until the volume is released; it never evicts a critical
// pod (the defer pod), but on a one-node cluster the next would be kdefer's own
// manager, which the local overlay runs without a priority class. The pod
// runs at a negative priority so that the kubelet's choice among the pods
// exceeding their ephemeral-storage requests is always this one.
//
// On a node of its own (reserveNode): the node under pressure refuses
// other pods.
func TestDiskPressure(t *testing.T) {
	s := newScenario(t, "pressure", onNode(reserveNode(t, nodeDisk)))
	threshold, before := s.nodefs()
	s.logf("node file system: %d MiB available, eviction threshold %d MiB available; memory.available %d MiB",
		before.AvailableBytes>>20, threshold>>20, s.memoryAvailable()>>20)
	if c := s.nodeCondition(corev1.NodeDiskPressure); c == nil || c.Status != corev1.ConditionFalse {
		t.Fatalf("node %s: DiskPressure %+v before the test, want False", s.node, c)
	}
	low := s.priorityClass("kdefer-e2e-batch", -1)
	w := small
	w.mode = fmt.Sprintf("pressure %d %d", (threshold+pressureMargin)>>10, 2*pressureMargin>>10)
	job := s.job("sim", w)
	// The filler stands for data nobody needs; the outputs are out/.
	job.Annotations[v1.AnnotationExclude] = "fill.bin"
	spec := &job.Spec.Template.Spec
	spec.PriorityClassName = low
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"})
	s.create(job)
	pod := s.waitReady(2 * time.Minute)
	s.recordPVs()
	// The kubelet's eviction manager looks every 10 s and reports the
	// condition with its next node status (4 s); the rest is for a loaded
	// machine.
	on := s.waitNodeCondition(corev1.NodeDiskPressure, corev1.ConditionTrue, 90*time.Second)
	s.logf("node %s: DiskPressure True since %s (%s)", s.node, on.LastTransitionTime.Format(time.TimeOnly), on.Message)
	// What a defer pod without a critical priority class would meet.
	s.refusedUnderPressure("probe")
	run := s.waitFinished(pod, v1.TriggerEvicted, v1.DeferRunSucceeded, 3*time.Minute)
	if r := run.Status.Refusals; r != nil {
		t.Errorf("the node refused %d defer pods (last: %s: %s)", r.Count, r.LastReason, r.LastMessage)
	}
	objs := s.checkOutputs("sim", pod, w, v1.TriggerEvicted)
	m, err := storage.ParseManifest(objs[stagecontract.ManifestKey].data)
	if err != nil {
		t.Fatal(err)
	}
	s.volumeReleased(run)
	// The PVs are Retain: the cluster wipes a Released one (as a
	// provisioner's Delete would) and the disk is free again.
	if !s.waitPVsUnbound(time.Minute) {
		t.FailNow()
	}
	recyclePVs(t, s.env)
	off := s.waitNodeCondition(corev1.NodeDiskPressure, corev1.ConditionFalse, 2*time.Minute)
	s.logf("node %s: DiskPressure False since %s", s.node, off.LastTransitionTime.Format(time.TimeOnly))
	// The stage-out ran in the defer pod after the kubelet admitted it, and
	// before the node stopped reporting DiskPressure (the report comes with
	// the next node status, up to 4 s after the kubelet's own view; the
	// times have 1 s steps).
	if !m.Start.Truncate(time.Second).Before(off.LastTransitionTime.Time) {
		t.Errorf("stage-out started at %s, after the node stopped reporting DiskPressure (%s)",
			m.Start.Format(time.TimeOnly), off.LastTransitionTime.Format(time.TimeOnly))
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased); c != nil && run.Status.TriggeredAt != nil {
		s.logf("evicted at %s, stage-out %s to %s, volume released at %s",
			run.Status.TriggeredAt.Format(time.TimeOnly), m.Start.Format(time.TimeOnly), m.End.Format(time.TimeOnly), c.LastTransitionTime.Format(time.TimeOnly))
	}
	_, after := s.nodefs()
	if after.AvailableBytes < before.AvailableBytes-pressureMargin {
		t.Errorf("node file system: %d MiB available after the release, %d MiB before the test", after.AvailableBytes>>20, before.AvailableBytes>>20)
	} else if run.Status.TriggeredAt != nil {
		s.logf("node file system: %d MiB available again, %s after the eviction", after.AvailableBytes>>20, time.Since(run.Status.TriggeredAt.Time).Round(time.Second))
	}
	s.podGone(pod, time.Minute)
	s.cleanUp("sim")
}

// refusedUnderPressure checks that the kubelet refuses a pod that is not
// critical, placed on the node as defer pods are (nodeName, no scheduler),
// while it reports a pressure condition: phase Failed, reason Evicted.
func (s *scenario) refusedUnderPressure(name string) {
	s.t.Helper()
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec:       s.podSpec("main", "true"),
	}
	probe.Spec.NodeName = s.node
	s.create(probe)
	s.t.Cleanup(func() { s.deletePod(name) })
	p, err := s.env.WaitPod(s.ctx, s.ns, name, time.Minute, "refused or run by the kubelet", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
	})
	if err != nil {
		s.t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "Evicted" {
		s.t.Errorf("pod %s without a priority class under pressure: phase %s reason %q (%s), want refused: Failed, Evicted",
			name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	} else {
		s.logf("pod %s without a priority class refused: %s", name, p.Status.Message)
	}
	s.deletePod(name)
}

// fsStats is a file system in the kubelet's stats summary.
type fsStats struct {
	AvailableBytes int64 `json:"availableBytes"`
	CapacityBytes  int64 `json:"capacityBytes"`
}

// summary is the part of the kubelet's stats summary the tests read.
type summary struct {
	Node struct {
		Fs     fsStats `json:"fs"`
		Memory struct {
			AvailableBytes int64 `json:"availableBytes"`
		} `json:"memory"`
	} `json:"node"`
}

func (s *scenario) summary() summary {
	s.t.Helper()
	var sum summary
	s.nodeProxy("stats/summary", &sum)
	return sum
}

func (s *scenario) memoryAvailable() int64 { return s.summary().Node.Memory.AvailableBytes }

// nodefs returns the kubelet's nodefs.available eviction threshold in bytes
// (from its live configuration) and the node file system as it sees it.
func (s *scenario) nodefs() (int64, fsStats) {
	s.t.Helper()
	var cfg struct {
		KubeletConfig struct {
			EvictionHard map[string]string `json:"evictionHard"`
		} `json:"kubeletconfig"`
	}
	s.nodeProxy("configz", &cfg)
	fs := s.summary().Node.Fs
	v, ok := cfg.KubeletConfig.EvictionHard["nodefs.available"]
	if !ok {
		s.t.Fatalf("the kubelet has no nodefs.available threshold (evictionHard %v)", cfg.KubeletConfig.EvictionHard)
	}
	if pct, isPct := strings.CutSuffix(v, "%"); isPct {
		var p float64
		if _, err := fmt.Sscan(pct, &p); err != nil {
			s.t.Fatalf("nodefs.available %q: %v", v, err)
		}
		return int64(p / 100 * float64(fs.CapacityBytes)), fs
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		s.t.Fatalf("nodefs.available %q: %v", v, err)
	}
	return q.Value(), fs
}

// nodeProxy GETs a kubelet endpoint through the apiserver into out.
func (s *scenario) nodeProxy(path string, out any) {
	s.t.Helper()
	raw, err := s.env.Clientset.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", s.node, "proxy", path).DoRaw(s.ctx)
	if err != nil {
		s.t.Fatalf("kubelet %s: %v", path, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		s.t.Fatalf("kubelet %s: %v", path, err)
	}
}

func (s *scenario) nodeCondition(typ corev1.NodeConditionType) *corev1.NodeCondition {
	s.t.Helper()
	n, err := s.env.Clientset.CoreV1().Nodes().Get(s.ctx, s.node, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// waitNodeCondition waits until the node reports the condition with status.
func (s *scenario) waitNodeCondition(typ corev1.NodeConditionType, status corev1.ConditionStatus, timeout time.Duration) *corev1.NodeCondition {
	s.t.Helper()
	var c *corev1.NodeCondition
	err := clusterenv.WaitFor(s.ctx, timeout, fmt.Sprintf("node %s: %s %s", s.node, typ, status), func(ctx context.Context) (bool, error) {
		c = s.nodeCondition(typ)
		return c != nil && c.Status == status, nil
	})
	if err != nil {
		s.t.Fatalf("%v (last: %+v)", err, c)
	}
	return c
}
