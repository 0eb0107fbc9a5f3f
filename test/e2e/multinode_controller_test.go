//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/cmd/kdefer-controller/app"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// replicas waits until one of kdefer's two controller pods leads and
// returns it and the other.
func (s *scenario) replicas() (leader, standby *corev1.Pod) {
	s.t.Helper()
	var n int
	err := clusterenv.WaitFor(s.ctx, time.Minute, "a leader among kdefer's two replicas", func(ctx context.Context) (bool, error) {
		pods, err := s.env.Clientset.CoreV1().Pods(kdeferNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kdefer,app.kubernetes.io/component=controller"})
		if err != nil {
			return false, err
		}
		leader, standby, n = nil, nil, 0
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil {
				continue
			}
			n++
			if s.leads(p.Name) {
				leader = p
			} else {
				standby = p
			}
		}
		return n == 2 && leader != nil && standby != nil, nil
	})
	if err != nil {
		s.t.Fatalf("%v: %d kdefer-controller pod(s) (test/e2e/multinode-values.yaml installs two)", err, n)
	}
	return leader, standby
}

// leads says whether the controller pod holds the leader Lease: the
// leading replica names its pod on the Lease (app.LeaderPodLabel), and the
// Lease is current (renewed within its duration).
func (s *scenario) leads(pod string) bool {
	lease, err := s.env.Clientset.CoordinationV1().Leases(kdeferNS).Get(s.ctx, app.LeaderElectionID, metav1.GetOptions{})
	if err != nil {
		s.logf("Lease %s: %v", app.LeaderElectionID, err)
		return false
	}
	sp := lease.Spec
	if sp.HolderIdentity == nil || *sp.HolderIdentity == "" || sp.RenewTime == nil || sp.LeaseDurationSeconds == nil {
		return false
	}
	current := time.Since(sp.RenewTime.Time) < time.Duration(*sp.LeaseDurationSeconds)*time.Second
	return current && lease.Labels[app.LeaderPodLabel] == pod
}

// TestMultiNodeControllerDrain: a plain drain of the node of kdefer's
// leader does not pause runs. The budget lets the drain evict one replica
// (it completes at once); another replica, off that node (the standby, or
// the one made in the evicted one's place), takes the Lease the evicted one
// released; a pod that ends after the drain gets its defer run as usual.
func TestMultiNodeControllerDrain(t *testing.T) {
	// Not parallel: the drain evicts every pod of the node.
	requireNodes(t, clusterenv.Require(t))
	s := newScenario(t, "mnctl", onAnyNode())
	leader, standby := s.replicas()
	node := leader.Spec.NodeName
	if standby.Spec.NodeName == node {
		t.Fatalf("both kdefer replicas run on %s (the chart's anti-affinity spreads them)", node)
	}
	w := small
	w.mode = "wait 0"
	job := s.job("sim", w)
	// The Job's pod runs elsewhere: the drain is about kdefer.
	job.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}}},
		}}},
	}}
	s.create(job)
	pod := s.waitReady(time.Minute)
	s.waitRun(pod, 30*time.Second, "armed", func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 })

	start := time.Now()
	d := s.drainNode(node)
	d.wait(t, time.Minute)
	s.logf("drain of the leader's node %s done in %s (leader %s evicted)", node, time.Since(start).Round(time.Second), leader.Name)
	// The Lease goes to the standby or to the replica the Deployment makes
	// in the evicted leader's place, whichever asks first: the new one asks
	// as it starts, the standby every 2 s (CI run w3 and a rerun: the new
	// replica led 1 s after the drain, and a wait for the standby alone
	// timed out). Either way the runs do not pause.
	var successor string
	err := clusterenv.WaitFor(s.ctx, 30*time.Second, "another replica than "+leader.Name+" to take the Lease", func(ctx context.Context) (bool, error) {
		pods, err := s.env.Clientset.CoreV1().Pods(kdeferNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kdefer,app.kubernetes.io/component=controller"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Name != leader.Name && p.DeletionTimestamp == nil && s.leads(p.Name) {
				successor = p.Name + " on " + p.Spec.NodeName
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		lease, _ := kubectl(context.Background(), "-n", kdeferNS, "get", "lease", "kdefer-controller.kdefer.io", "-o", "yaml")
		procs, _ := exec.Command("pgrep", "-af", "kdefer-controller").CombinedOutput()
		t.Fatalf("%v\nthe Lease:\n%s\nkdefer-controller processes on this machine:\n%s", err, lease, procs)
	}
	s.logf("%s leads %s after the drain started (the standby was %s)", successor, time.Since(start).Round(time.Second), standby.Name)

	released := time.Now()
	s.sig.release(pod)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, time.Minute)
	s.logf("run finished %s after its pod was let go", time.Since(released).Round(time.Second))
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	if out, err := kubectl(s.ctx, "uncordon", node); err != nil {
		t.Fatalf("uncordon %s: %v: %s", node, err, out)
	}
	// Both replicas again for the scenarios after this one.
	if out, err := kubectl(s.ctx, "-n", kdeferNS, "rollout", "status", "deployment/kdefer-controller", "--timeout=90s"); err != nil {
		t.Fatalf("kdefer's replicas: %v: %s", err, out)
	}
	s.cleanUp("sim")
}
