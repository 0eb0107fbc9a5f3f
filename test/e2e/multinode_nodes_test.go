//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// sharedClass is the e2e cluster's storage class whose volumes every node
// mounts (test/cluster/lib/storage.sh): network storage's stand-in.
const sharedClass = "kdefer-shared"

// nodeJob creates the scenario's Job "sim", its pod required on node, its
// runs waiting nodeLostTimeout for a node that went away, its work volume
// of storage class class ("" for the cluster's default, node-local).
func (s *scenario) nodeJob(node string, w workload, nodeLostTimeout time.Duration, class string) {
	s.t.Helper()
	s.create(&v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "node", Namespace: s.ns},
		Spec:       v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: s.stageOutURL()}, NodeLostTimeout: &metav1.Duration{Duration: nodeLostTimeout}},
	})
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationPolicy] = "node"
	job.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	if class != "" {
		job.Annotations[v1.AnnotationStorageClass] = class
	}
	s.create(job)
}

// waitNodeReady waits until node's Ready condition is want (a deleted node is not Ready).
func (s *scenario) waitNodeReady(node string, want bool, timeout time.Duration) {
	s.t.Helper()
	what := "Ready"
	if !want {
		what = "not Ready"
	}
	err := clusterenv.WaitFor(s.ctx, timeout, "node "+node+" "+what, func(ctx context.Context) (bool, error) {
		n, err := s.env.Clientset.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // deleted, or not yet registered again
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return (c.Status == corev1.ConditionTrue) == want, nil
			}
		}
		return false, nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// clusterNode runs `cluster.sh VERB NODE` (stop, start, kill).
func (s *scenario) clusterNode(verb, node string) {
	s.t.Helper()
	if out, err := s.env.Cluster(s.ctx, verb, node); err != nil {
		s.t.Fatalf("cluster.sh %s %s: %v: %s", verb, node, err, out)
	}
	s.logf("cluster.sh %s %s", verb, node)
}

// TestMultiNodeNodeLost: what happens to a run when its node goes away, on
// a cluster whose other nodes go on. Kept to the node without a kdefer
// replica (lost) and a standby's node whose containers keep running (back),
// so that kdefer itself is not disturbed.
func TestMultiNodeNodeLost(t *testing.T) {
	// Not parallel with other scenarios: it takes nodes away.
	requireNodes(t, clusterenv.Require(t))
	probe := newScenario(t, "mnlost-probe", onAnyNode())
	_, standby := probe.replicas()
	ctl := probe.controllerNodes()
	lostNode := ""
	for _, n := range requireNodes(t, probe.env) {
		if !ctl[n] {
			lostNode = n
		}
	}
	if lostNode == "" {
		t.Fatalf("kdefer runs on every node")
	}
	t.Run("Lost", func(t *testing.T) {
		t.Parallel()
		nodeLostForGood(t, lostNode)
	})
	t.Run("Back", func(t *testing.T) {
		t.Parallel()
		nodeBack(t, standby.Spec.NodeName)
	})
}

// nodeLostForGood: the node loses power (cluster.sh kill: kubelet,
// containerd and every process of its pods) and its Node is deleted, while
// two pods run there. One's work volume is a local PV of that node: nothing
// else can mount it, so after nodeLostTimeout its run fails with reason
// NodeLost and keeps the volume, every byte the pod wrote still on it;
// `kdefer release` lets it go. The other's is on storage every node mounts
// (kdefer-shared): its run relocates, the scheduler placing the defer pod
// on another node, and stages out what the pod wrote. The node boots again
// at the end for the scenarios after this one.
func nodeLostForGood(t *testing.T, node string) {
	// The moved pod's log files were on the lost node's disk: its
	// relocated defer pod cannot have them, and the agent of its new node
	// says so.
	local, moved := newScenario(t, "mnlost", onAnyNode()), newScenario(t, "mnmove", onAnyNode(), logsMayBeLost("and its logs stayed there"))
	w := small
	w.mode = "hold"
	local.nodeJob(node, w, 15*time.Second, "")
	moved.nodeJob(node, w, 15*time.Second, sharedClass)
	armed := func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 }
	pod, mpod := local.waitReady(time.Minute), moved.waitReady(time.Minute)
	local.waitRun(pod, 30*time.Second, "armed", armed)
	moved.waitRun(mpod, 30*time.Second, "armed", armed)
	local.recordPVs()
	moved.recordPVs()
	booted := false
	t.Cleanup(func() {
		if !booted {
			_, _ = local.env.Cluster(context.Background(), "start", node)
		}
	})
	start := time.Now()
	local.clusterNode("kill", node)
	if err := local.env.Clientset.CoreV1().Nodes().Delete(local.ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	local.logf("node %s deleted", node)
	cli := program(t, "./cmd/kdefer") // while the pod garbage collector takes its time (40 s for a pod of a deleted node)

	relocated(moved, mpod, node, w, start)
	retained(local, pod, w, start, cli)
	// Booted again, the kubelet registers the Node anew.
	local.clusterNode("start", node)
	booted = true
	local.waitNodeReady(node, true, time.Minute)
}

// relocated: the run of pod, whose node was lost, stages out from another
// node; its volume moved with it.
func relocated(s *scenario, pod, lost string, w workload, start time.Time) {
	s.t.Helper()
	run := s.waitRun(pod, 3*time.Minute, "with a relocated defer pod", inProgress)
	dp, err := s.env.WaitPod(s.ctx, s.ns, run.Status.DeferPodName, time.Minute, "scheduled", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	if err != nil {
		s.t.Fatal(err)
	}
	if dp.Spec.NodeName == lost {
		s.t.Fatalf("relocated defer pod %s on the lost node %s", dp.Name, lost)
	}
	s.logf("defer pod %s relocated to %s, %s after the node was lost", dp.Name, dp.Spec.NodeName, time.Since(start).Round(time.Second))
	run = s.waitFinished(pod, v1.TriggerPodGC, v1.DeferRunSucceeded, 2*time.Minute)
	s.checkOutputs("sim", pod, w, v1.TriggerPodGC)
	s.volumeReleased(run)
	s.cleanUp("sim")
}

// retained: the run of pod, whose node was lost with its node-local
// volume, fails with reason NodeLost and keeps the volume until `kdefer
// release` (the CLI at cli).
func retained(s *scenario, pod string, w workload, start time.Time, cli string) {
	t := s.t
	t.Helper()
	run := s.waitRun(pod, 3*time.Minute, "to fail", finished)
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
	if run.Status.State != v1.DeferRunFailed || c == nil || c.Reason != v1.ReasonNodeLost {
		t.Fatalf("DeferRun %s: state %s, Failed condition %+v, want Failed/NodeLost", pod, run.Status.State, c)
	}
	s.logf("DeferRun %s failed %s after the node was lost (trigger %s): %s", pod, time.Since(start).Round(time.Second), run.Status.Trigger, c.Message)
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("VolumeReleased condition %+v, want False (retained)", c)
	}
	s.pvcStaysGuarded(pod, time.Second)
	// The volume is retained with every byte the pod wrote: the node's
	// file system is still there (a node that boots again, or a disk an
	// operator moves, would have it).
	s.retainedHoldsOutputs(pod, w)
	// The CLI lets it go.
	out, err := exec.CommandContext(s.ctx, cli, "--kubeconfig", clusterenv.Dir()+"/kubeconfig", "-n", s.ns, "release", "deferrun/"+pod).CombinedOutput()
	if err != nil {
		t.Fatalf("kdefer release: %v: %s", err, out)
	}
	s.logf("kdefer release: %s", bytes.TrimSpace(out))
	s.volumeReleased(run)
	s.cleanUp("sim")
}

// nodeBack: the node's kubelet and containerd stop (its containers run
// on) until the node is NotReady; the pod ends meanwhile, unseen. The node
// comes back within the policy's nodeLostTimeout: the kubelet reports the
// end, and the run stages out there, as if nothing had happened.
func nodeBack(t *testing.T, node string) {
	s := newScenario(t, "mnback", onAnyNode())
	w := small
	w.mode = "wait 0"
	s.nodeJob(node, w, 5*time.Minute, "")
	pod := s.waitReady(time.Minute)
	s.waitRun(pod, 30*time.Second, "armed", func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 })
	booted := false
	t.Cleanup(func() {
		if !booted {
			_, _ = s.env.Cluster(context.Background(), "start", node)
		}
	})
	s.clusterNode("stop", node)
	s.sig.release(pod)
	s.waitNodeReady(node, false, 2*time.Minute)
	if r := s.run(pod); r == nil || r.Status.Trigger != "" {
		t.Fatalf("DeferRun %s triggered while its node was away", pod)
	}
	s.clusterNode("start", node)
	booted = true
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)
	if run.Status.NodeName != node {
		t.Errorf("DeferRun %s ran on %q, want its node %s", pod, run.Status.NodeName, node)
	}
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	s.cleanUp("sim")
}
