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
// that the runs fail NodeLost soon after the node monitor marks the node
// NotReady (~50 s, its grace period), well before the taint manager would
// delete the Jobs' pods (300 s, the default unreachable toleration).
const crashLostTimeout = 15 * time.Second

// TestNodeCrash: a node crashes (cluster.sh kill: its kubelet, containerd,
// shims and every process of its pods get SIGKILL at once; its disk stays)
// with two runs on it, on local PVs of that node:
//   - armed: its pod still runs. Nothing on the node reports the pod's
//     end, so the run is triggered NodeLost nodeLostTimeout after the node
//     went NotReady and fails with reason NodeLost, keeping the volume and
//     releasing the pod;
//   - staging out: its pod has ended (Succeeded) and its defer pod's
//     stage-out is done, a defer container still running. The node not
//     Ready past nodeLostTimeout after the trigger, the run fails NodeLost.
//
// Then the node boots again: once it is Ready both runs resume by themselves
// (NodeReturned), each with a new defer pod on that node that runs only
// the steps that had not succeeded, and succeed; the volumes are released.
// On a node of its own (reserveNode), which is booted and Ready again when
// the scenario ends, whatever happened.
func TestNodeCrash(t *testing.T) {
	node := reserveNode(t, nodeDrain)
	a, so := newScenario(t, "crash", onNode(node)), newScenario(t, "crashso", onNode(node))

	w := small
	w.mode = "wait 0" // quiet once its outputs are written: the crash loses no log line
	a.nodeJob(node, w, crashLostTimeout, "")
	pod := a.waitReady(time.Minute)
	a.waitRun(pod, 30*time.Second, "armed", func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 })

	wso := small
	wso.mode = "exit 0"
	pol := so.holdPolicy("hold")
	pol.Spec.NodeLostTimeout = &metav1.Duration{Duration: crashLostTimeout}
	so.create(pol)
	job := so.job("sim", wso)
	job.Annotations[v1.AnnotationPolicy] = "hold"
	so.create(job)
	sopod := so.waitReady(time.Minute)
	if ready := so.waitReady(2 * time.Minute); ready != "defer-"+sopod {
		t.Fatalf("unexpected ready signal %q, want defer-%s", ready, sopod)
	}

	// Whatever happens, the node ends booted and Ready (start does nothing
	// to a running node's kubelet and containerd).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := a.env.Cluster(ctx, "start", node); err != nil {
			t.Errorf("booting node %s again: %v: %s", node, err, out)
			return
		}
		if err := clusterenv.WaitFor(ctx, 2*time.Minute, "node "+node+" Ready", func(ctx context.Context) (bool, error) {
			n, err := a.env.Clientset.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			return err == nil && nodeIsReady(n), nil
		}); err != nil {
			t.Errorf("after the scenario: %v", err)
		}
	})

	crashed := time.Now()
	a.clusterNode("kill", node)
	a.waitNodeReady(node, false, 2*time.Minute)
	notReady := time.Since(crashed)
	a.logf("node %s NotReady %s after the crash", node, notReady.Round(time.Second))
	if r := a.run(pod); r == nil || r.Status.Trigger != "" {
		t.Fatalf("DeferRun %s triggered before its node had been NotReady for nodeLostTimeout", pod)
	}

	// NodeLost: the runs fail, the volumes kept with every byte, the pod
	// of the armed one released.
	lost := a.crashLost(pod, node, v1.TriggerNodeLost, crashed)
	a.noFinalizer(pod)
	a.pvcStaysGuarded(pod, time.Second)
	a.retainedHoldsOutputs(pod, w)
	so.crashLost(sopod, node, v1.TriggerSucceeded, crashed)
	so.retainedHoldsOutputs(sopod, wso)

	// The node boots again: the runs resume there (NodeReturned) and succeed.
	a.clusterNode("start", node)
	a.waitNodeReady(node, true, 2*time.Minute)
	back := time.Since(crashed)
	// Still Failed when the node turns Ready: wait for the resume first.
	resumed := func(r *v1.DeferRun) bool { return r.Status.Retries != nil && r.Status.Retries.Count > 0 }
	a.waitRun(pod, time.Minute, "resumed (NodeReturned)", resumed)
	so.waitRun(sopod, time.Minute, "resumed (NodeReturned)", resumed)
	resumedAt := time.Since(crashed)
	run := a.waitFinished(pod, v1.TriggerNodeLost, v1.DeferRunSucceeded, 3*time.Minute)
	done := time.Since(crashed)
	a.logf("timings from the crash: NotReady %s, NodeLost %s, Ready again %s, resumed %s, Succeeded %s", notReady.Round(time.Second),
		lost.Round(time.Second), back.Round(time.Second), resumedAt.Round(time.Second), done.Round(time.Second))
	a.crashResumed(run, node)
	a.checkOutputs("sim", pod, w, v1.TriggerNodeLost)
	// What the returned kubelet made of the pod it had run (for the record:
	// kdefer released it at NodeLost and reads nothing of it since).
	if p, err := a.env.Clientset.CoreV1().Pods(a.ns).Get(a.ctx, pod, metav1.GetOptions{}); err == nil {
		for _, cs := range p.Status.ContainerStatuses {
			if tr := cs.State.Terminated; tr != nil {
				a.logf("pod %s after the node's return: phase %s, container %s terminated %s exit %d", pod, p.Status.Phase, cs.Name, tr.Reason, tr.ExitCode)
			}
		}
	}
	a.volumeReleased(run)
	a.cleanUp("sim")

	// The staging-out run's new defer pod runs the defer container alone:
	// the stage-out had succeeded and is not repeated.
	if ready := so.waitReady(2 * time.Minute); ready != "defer-"+sopod {
		t.Fatalf("unexpected ready signal %q, want defer-%s", ready, sopod)
	}
	so.sig.release("defer-" + sopod)
	run = so.waitFinished(sopod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)
	so.crashResumed(run, node)
	if st := run.Status.Steps; len(st) == 0 || st[0].Name != "stage-out" || st[0].Attempts != 1 {
		t.Errorf("steps %s: want the one stage-out attempt of before the crash", steps(run))
	}
	so.checkOutputs("sim", sopod, wso, v1.TriggerSucceeded)
	so.volumeReleased(run)
	so.cleanUp("sim")
}

// crashLost waits for the run of pod, on the crashed node, to fail with
// reason NodeLost and trigger, its volume kept; it returns when, from the
// crash, that was seen.
func (s *scenario) crashLost(pod, node string, trigger v1.Trigger, crashed time.Time) time.Duration {
	s.t.Helper()
	run := s.waitRun(pod, 2*time.Minute, "to fail", finished)
	lost := time.Since(crashed)
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
	if run.Status.State != v1.DeferRunFailed || c == nil || c.Reason != v1.ReasonNodeLost || run.Status.Trigger != trigger {
		s.t.Fatalf("DeferRun %s: state %s trigger %s, Failed condition %+v, want Failed/NodeLost, trigger %s", pod, run.Status.State, run.Status.Trigger, c, trigger)
	}
	s.logf("DeferRun %s (trigger %s) failed NodeLost %s after the crash (seen %s after): %s", pod, trigger,
		c.LastTransitionTime.Sub(crashed).Round(time.Second), lost.Round(time.Second), c.Message)
	if run.Status.NodeName != node {
		s.t.Errorf("DeferRun %s: node %q, want %s", pod, run.Status.NodeName, node)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased); c == nil || c.Status != metav1.ConditionFalse {
		s.t.Errorf("VolumeReleased condition %+v, want False (retained)", c)
	}
	return lost
}

// crashResumed checks that the run, which failed NodeLost, was resumed
// once, by its node's return, and ran there.
func (s *scenario) crashResumed(run *v1.DeferRun, node string) {
	s.t.Helper()
	if run.Status.NodeName != node {
		s.t.Errorf("DeferRun %s ran on %q, want its node %s", run.Name, run.Status.NodeName, node)
	}
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonNodeReturned {
		s.t.Errorf("DeferRun %s: Failed condition %+v, want False/NodeReturned", run.Name, c)
	}
	if rt := run.Status.Retries; rt == nil || rt.Count != 1 || len(rt.History) != 1 ||
		rt.History[0].Reason != v1.ReasonNodeLost || rt.History[0].ResumedBy != v1.ReasonNodeReturned {
		s.t.Errorf("DeferRun %s: retries %+v, want one attempt failed NodeLost and resumed NodeReturned", run.Name, rt)
	}
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
