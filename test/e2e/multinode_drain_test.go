//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// drainNode starts a plain `kubectl drain` of node: no --force, no pod
// selector, every pod of the node. --delete-emptydir-data because a defer
// pod has a scratch emptyDir (/tmp) and kubectl refuses to evict a running
// pod with one without it; kdefer's budget, not that flag, protects it.
func (s *scenario) drainNode(node string) *bg {
	s.t.Helper()
	s.t.Cleanup(func() { _, _ = kubectl(context.Background(), "uncordon", node) })
	return kubectlBG(s.ctx, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s")
}

// waitMains waits for n pods of the scenario's Job to signal ready and
// returns them as they were then (their node, their completion index).
func (s *scenario) waitMains(n int) map[string]*corev1.Pod {
	s.t.Helper()
	mains := map[string]*corev1.Pod{}
	for len(mains) < n {
		pod := s.waitReady(3 * time.Minute)
		p, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(s.ctx, pod, metav1.GetOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		mains[pod] = p
	}
	return mains
}

// waitDeferReady waits for the defer pod of one of pods to signal ready
// (its hold step) and returns that pod.
func (s *scenario) waitDeferReady(pods ...string) string {
	s.t.Helper()
	ready := s.waitReady(2 * time.Minute)
	pod, ok := strings.CutPrefix(ready, "defer-")
	if !ok || !slices.Contains(pods, pod) {
		s.t.Fatalf("unexpected ready signal %q, want a defer pod of %v", ready, pods)
	}
	return pod
}

// controllerNodes are the nodes that run a kdefer-controller pod.
func (s *scenario) controllerNodes() map[string]bool {
	s.t.Helper()
	pods, err := s.env.Clientset.CoreV1().Pods(kdeferNS).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kdefer,app.kubernetes.io/component=controller"})
	if err != nil {
		s.t.Fatal(err)
	}
	on := map[string]bool{}
	for _, p := range pods.Items {
		on[p.Spec.NodeName] = true
	}
	return on
}

// prePullPods are the scenario's pre-pull pods on node that are not being deleted.
func (s *scenario) prePullPods(node string) []corev1.Pod {
	s.t.Helper()
	pods, err := s.env.Clientset.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: v1.LabelManaged + "=" + controller.LabelManagedPrePull})
	if err != nil {
		s.t.Fatal(err)
	}
	var on []corev1.Pod
	for _, p := range pods.Items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			on = append(on, p)
		}
	}
	return on
}

// TestMultiNodeDrain: a plain `kubectl drain` (no --force) of one node of
// three while an Indexed Job runs on all of them, a defer run is in progress
// on that node and kdefer's pre-pull pods are there. Only that node's
// running pod stages out (trigger Drained); the drain waits for the defer
// pods on the node (their budget) and then completes; the pods on the other
// nodes are not touched and finish normally (Succeeded); no pre-pull pod
// comes back to the cordoned node.
func TestMultiNodeDrain(t *testing.T) {
	// Not parallel: a drain without a pod selector evicts every pod of the node.
	const pods = 6
	nodes := requireNodes(t, clusterenv.Require(t))
	s := newScenario(t, "mndrain", onAnyNode())
	s.create(s.holdPolicy("hold"))
	w := small
	w.mode = "wait 0"
	job := s.spreadJob("sweep", w, pods)
	job.Annotations[v1.AnnotationPolicy] = "hold"
	// An evicted pod's index fails without a retry, and only that index: a
	// Job-wide backoffLimit 0 would end the Job and kill the other nodes'
	// pods; a retry could land on no node (the spread counts the cordoned one).
	job.Spec.BackoffLimit, job.Spec.BackoffLimitPerIndex = nil, ptr.To[int32](0)
	s.create(job)
	mains := s.waitMains(pods)

	// The node to drain: one that runs none of kdefer's controller pods
	// (TestMultiNodeControllerDrain drains the leader's).
	ctl := s.controllerNodes()
	target := ""
	for _, n := range nodes {
		if !ctl[n] {
			target = n
			break
		}
	}
	if target == "" {
		t.Fatalf("kdefer's controller runs on every node %v", nodes)
	}
	var onTarget, elsewhere []string
	for pod, p := range mains {
		if p.Spec.NodeName == target {
			onTarget = append(onTarget, pod)
		} else {
			elsewhere = append(elsewhere, pod)
		}
	}
	slices.Sort(onTarget)
	if len(onTarget) != pods/len(nodes) {
		t.Fatalf("node %s runs %v, want %d pods (topology spread)", target, onTarget, pods/len(nodes))
	}
	// kdefer pre-pulls the stage image on every node of an armed pod; those
	// pods declare a controller (their run), as drain wants without --force.
	err := clusterenv.WaitFor(s.ctx, time.Minute, "a pre-pull pod on every node", func(context.Context) (bool, error) {
		for _, n := range nodes {
			if len(s.prePullPods(n)) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.prePullPods(target) {
		if metav1.GetControllerOf(&p) == nil || p.Annotations[controller.AnnotationSafeToEvict] != "true" {
			t.Errorf("pre-pull pod %s: owners %+v, annotations %v: want a controller and safe-to-evict", p.Name, p.OwnerReferences, p.Annotations)
		}
	}

	// A defer run in progress on the node: its first pod ends, and its
	// defer pod holds, Running (the Eviction API ignores budgets of Pending pods).
	done, evicted := onTarget[0], onTarget[1]
	s.sig.release(done)
	s.waitDeferReady(done)
	run := s.waitRun(done, 30*time.Second, "with a defer pod", inProgress)
	if _, err := s.env.WaitPod(s.ctx, s.ns, run.Status.DeferPodName, 30*time.Second, "Running and Ready", podReady); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	d := s.drainNode(target)
	// The node's running pod is evicted and stages out there (its defer
	// pod on the cordoned node); the drain waits for the defer pod it found.
	s.waitDeferReady(evicted)
	d.waitLine(t, "disruption budget", 30*time.Second)
	s.logf("drain of %s waits for defer pod %s (budget)", target, run.Status.DeferPodName)
	if !d.running() {
		t.Fatalf("the drain ended while defer runs were in progress on the node:\n%s", d.output())
	}
	for _, pod := range elsewhere {
		p, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(s.ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s on node %s: phase %s, deleted %v while %s was drained", pod, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp, target)
		}
		if r := s.run(pod); r == nil || r.Status.Trigger != "" {
			t.Errorf("DeferRun %s on node %s triggered while %s was drained", pod, mains[pod].Spec.NodeName, target)
		}
	}
	s.sig.release("defer-" + done)
	s.sig.release("defer-" + evicted)
	d.wait(t, 2*time.Minute)
	s.logf("drain of %s done in %s, without --force:\n%s", target, time.Since(start).Round(time.Second), d.output())
	if pp := s.prePullPods(target); len(pp) != 0 {
		t.Errorf("pre-pull pod %s on the drained node %s", pp[0].Name, target)
	}

	// The other nodes' pods were never disturbed: they finish normally.
	for _, pod := range elsewhere {
		s.sig.release(pod)
	}
	for range elsewhere {
		s.sig.release("defer-" + s.waitDeferReady(elsewhere...))
	}
	for pod, p := range mains {
		trigger := v1.TriggerSucceeded
		if pod == evicted {
			trigger = v1.TriggerDrained
		}
		run := s.waitFinished(pod, trigger, v1.DeferRunSucceeded, 2*time.Minute)
		if run.Status.NodeName != p.Spec.NodeName {
			t.Errorf("DeferRun %s ran on %q, its pod on %q", pod, run.Status.NodeName, p.Spec.NodeName)
		}
		s.checkOutputs("sweep/"+p.Annotations[batchv1.JobCompletionIndexAnnotation], pod, w, trigger)
		s.volumeReleased(run)
	}
	if out, err := kubectl(s.ctx, "uncordon", target); err != nil {
		t.Fatalf("uncordon %s: %v: %s", target, err, out)
	}
	s.cleanUp("sweep")
}
