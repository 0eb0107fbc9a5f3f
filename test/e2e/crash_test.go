//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// crashLostTimeout is the scenario's policy nodeLostTimeout: short, so
// that the run fails NodeLost soon after the node monitor marks the node
// NotReady (~50 s, its grace period), well before the taint manager would
// delete the pod (300 s, the default unreachable toleration).
const crashLostTimeout = 15 * time.Second

// TestNodeCrash: the node of a running pod crashes (cluster.sh kill: its
// kubelet, containerd, shims and every process of its pods get SIGKILL at
// once; its disk stays). Nothing on the node reports the pod's end, so the
// pod's run is triggered NodeLost nodeLostTimeout after the node went
// NotReady and, its volume being a local PV of that node, fails with
// reason NodeLost, keeping the volume and releasing the pod. Then the node
// boots again: once it is Ready the run resumes by itself (NodeReturned),
// a new defer pod on that node stages out what the pod wrote, and the
// volume is released. On a node of its own (reserveNode), which is booted
// and Ready again when the scenario ends, whatever happened.
func TestNodeCrash(t *testing.T) {
	s := newScenario(t, "crash", onNode(reserveNode(t, nodeDisk)))
	node := s.node
	w := small
	w.mode = "wait 0" // quiet once its outputs are written: the crash loses no log line
	s.nodeJob(node, w, crashLostTimeout, "")
	pod := s.waitReady(time.Minute)
	s.waitRun(pod, 30*time.Second, "armed", func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 })
	// Whatever happens, the node ends booted and Ready (start does nothing
	// to a running node's kubelet and containerd).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := s.env.Cluster(ctx, "start", node); err != nil {
			t.Errorf("booting node %s again: %v: %s", node, err, out)
			return
		}
		if err := clusterenv.WaitFor(ctx, 2*time.Minute, "node "+node+" Ready", func(ctx context.Context) (bool, error) {
			n, err := s.env.Clientset.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			return err == nil && nodeIsReady(n), nil
		}); err != nil {
			t.Errorf("after the scenario: %v", err)
		}
	})

	crashed := time.Now()
	s.clusterNode("kill", node)
	s.waitNodeReady(node, false, 2*time.Minute)
	notReady := time.Since(crashed)
	s.logf("node %s NotReady %s after the crash", node, notReady.Round(time.Second))
	if r := s.run(pod); r == nil || r.Status.Trigger != "" {
		t.Fatalf("DeferRun %s triggered before its node had been NotReady for nodeLostTimeout", pod)
	}

	// NodeLost: the run fails, the volume kept with every byte, the pod released.
	run := s.waitRun(pod, 2*time.Minute, "to fail", finished)
	lost := time.Since(crashed)
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
	if run.Status.State != v1.DeferRunFailed || c == nil || c.Reason != v1.ReasonNodeLost || run.Status.Trigger != v1.TriggerNodeLost {
		t.Fatalf("DeferRun %s: state %s trigger %s, Failed condition %+v, want Failed/NodeLost, trigger NodeLost", pod, run.Status.State, run.Status.Trigger, c)
	}
	s.logf("DeferRun %s failed NodeLost %s after the crash: %s", pod, lost.Round(time.Second), c.Message)
	if run.Status.NodeName != node {
		t.Errorf("DeferRun %s: node %q, want %s", pod, run.Status.NodeName, node)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("VolumeReleased condition %+v, want False (retained)", c)
	}
	s.noFinalizer(pod)
	s.pvcStaysGuarded(pod, time.Second)
	s.retainedHoldsOutputs(pod, w)

	// The node boots again: the run resumes there (NodeReturned) and succeeds.
	s.clusterNode("start", node)
	s.waitNodeReady(node, true, 2*time.Minute)
	back := time.Since(crashed)
	// Still Failed when the node turns Ready: wait for the resume first.
	s.waitRun(pod, time.Minute, "resumed (NodeReturned)", func(r *v1.DeferRun) bool {
		return r.Status.Retries != nil && r.Status.Retries.Count > 0
	})
	resumed := time.Since(crashed)
	run = s.waitFinished(pod, v1.TriggerNodeLost, v1.DeferRunSucceeded, 3*time.Minute)
	done := time.Since(crashed)
	s.logf("timings from the crash: NotReady %s, NodeLost %s, Ready again %s, resumed %s, Succeeded %s", notReady.Round(time.Second),
		lost.Round(time.Second), back.Round(time.Second), resumed.Round(time.Second), done.Round(time.Second))
	if run.Status.NodeName != node {
		t.Errorf("DeferRun %s ran on %q, want its node %s", pod, run.Status.NodeName, node)
	}
	c = meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonNodeReturned {
		t.Errorf("DeferRun %s: Failed condition %+v, want False/NodeReturned", pod, c)
	}
	if rt := run.Status.Retries; rt == nil || rt.Count != 1 || len(rt.History) != 1 ||
		rt.History[0].Reason != v1.ReasonNodeLost || rt.History[0].ResumedBy != v1.ReasonNodeReturned {
		t.Errorf("DeferRun %s: retries %+v, want one attempt failed NodeLost and resumed NodeReturned", pod, rt)
	}
	s.checkOutputs("sim", pod, w, v1.TriggerNodeLost)
	// What the returned kubelet made of the pod it had run (for the record:
	// kdefer released it at NodeLost and reads nothing of it since).
	if p, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(s.ctx, pod, metav1.GetOptions{}); err == nil {
		for _, cs := range p.Status.ContainerStatuses {
			if tr := cs.State.Terminated; tr != nil {
				s.logf("pod %s after the node's return: phase %s, container %s terminated %s exit %d", pod, p.Status.Phase, cs.Name, tr.Reason, tr.ExitCode)
			}
		}
	}
	s.volumeReleased(run)
	s.cleanUp("sim")
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
