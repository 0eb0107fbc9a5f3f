//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// Disruptive tests: they drain the node or restart its kubelet (each on a
// node of its own, lanes_test.go), or kill or stop kdefer (serial: one at a
// time before the parallel ones, no t.Parallel). Each leaves kdefer running
// and the node schedulable.

// bigger makes the upload take a moment, so disruptions hit it.
var bigger = workload{files: 6, size: 4 << 20}

// TestDrain: `kubectl drain` evicts the pod (trigger Drained); the defer
// pod's PodDisruptionBudget makes that drain, and a second, plain `kubectl
// drain` of the node, wait until the defer run ends.
func TestDrain(t *testing.T) {
	s := newScenario(t, "drain", onNode(reserveNode(t, nodeDrain)))
	s.create(s.holdPolicy("hold"))
	w := small
	w.mode = "hold"
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationPolicy] = "hold"
	job.Spec.Template.Labels = map[string]string{"e2e-drain": s.ns}
	s.create(job)
	pod := s.waitReady(time.Minute)
	d1 := s.drain("e2e-drain=" + s.ns)
	if ready := s.waitReady(2 * time.Minute); ready != "defer-"+pod {
		t.Fatalf("unexpected ready signal %q", ready)
	}
	// The defer pod runs (stage-out done, the hold step waiting): a drain
	// that reaches it is refused by its budget and keeps retrying.
	run := s.waitRun(pod, 30*time.Second, "with a defer pod", inProgress)
	// The Eviction API ignores budgets of Pending pods: wait until the API
	// shows the defer pod Running (the kubelet reports it a moment later).
	if _, err := s.env.WaitPod(s.ctx, s.ns, run.Status.DeferPodName, 30*time.Second, "Running and Ready", podReady); err != nil {
		t.Fatal(err)
	}
	// A second drain, plain this time, as an administrator would run it:
	// it evicts whatever the node runs, and the defer pod's budget holds it.
	// (On a one-node cluster, where kdefer and every scenario share the
	// node, it stays scoped to the defer pod.)
	var d2 *bg
	if s.node == s.env.NodeName {
		d2 = s.drain("kdefer.io/deferrun=" + pod)
	} else {
		d2 = s.drainNode(s.node)
	}
	d2.waitLine(t, "disruption budget", 30*time.Second)
	s.logf("drain waits for defer pod %s (budget)", run.Status.DeferPodName)
	s.notTheJobs("sim", run.Status.DeferPodName)
	if !d1.running() {
		t.Errorf("the first drain ended while the defer run was in progress:\n%s", d1.output())
	}
	if err := s.env.Evict(s.ctx, s.ns, run.Status.DeferPodName); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting the running defer pod: %v, want 429 (its PodDisruptionBudget)", err)
	}
	s.sig.release("defer-" + pod)
	d1.wait(t, 2*time.Minute)
	d2.wait(t, 2*time.Minute)
	s.logf("both drains done")
	s.uncordon()
	run = s.waitFinished(pod, v1.TriggerDrained, v1.DeferRunSucceeded, 2*time.Minute)
	s.checkOutputs("sim", pod, w, v1.TriggerDrained)
	s.volumeReleased(run)
	s.podGone(pod, time.Minute)
	s.cleanUp("sim")
}

// TestControllerKilled: kdefer's manager is SIGKILLed while the pod runs
// (the pod then ends while it is down) and again as soon as the defer pod
// exists; the run still completes, with one stage-out attempt.
func TestControllerKilled(t *testing.T) {
	s := newScenario(t, "ctlkill")
	s.create(s.holdPolicy("hold"))
	w := bigger
	w.mode = "wait 0"
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationPolicy] = "hold"
	s.create(job)
	pod := s.waitReady(time.Minute)
	s.waitRun(pod, 30*time.Second, "armed", func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 })
	// The pod ends while the manager is dead.
	n := s.killController()
	s.sig.release(pod)
	s.waitController(n)
	// Killed again as soon as the defer pod exists.
	s.waitRun(pod, 2*time.Minute, "with a defer pod", inProgress)
	s.waitController(s.killController())
	if ready := s.waitReady(2 * time.Minute); ready != "defer-"+pod {
		t.Fatalf("unexpected ready signal %q", ready)
	}
	s.sig.release("defer-" + pod)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)
	if st := run.Status.Steps; len(st) == 0 || st[0].Attempts != 1 {
		t.Errorf("steps %s: want one stage-out attempt", steps(run))
	}
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	s.noFinalizer(pod)
	s.cleanUp("sim")
}

// TestKubeletRestartedDuringStageOut: the kubelet restarts as soon as the
// defer pod exists (its stage-out starting or uploading).
func TestKubeletRestartedDuringStageOut(t *testing.T) {
	s := newScenario(t, "kubelet", onNode(reserveNode(t, nodeDrain)))
	s.create(s.holdPolicy("hold"))
	w := bigger
	w.mode = "exit 0"
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationPolicy] = "hold"
	s.create(job)
	pod := s.waitReady(time.Minute)
	s.waitRun(pod, 2*time.Minute, "with a defer pod", inProgress)
	if out, err := s.env.Cluster(s.ctx, "restart", "kubelet", "--node", s.node); err != nil {
		t.Fatalf("restart kubelet: %v: %s", err, out)
	}
	s.logf("kubelet restarted")
	if ready := s.waitReady(3 * time.Minute); ready != "defer-"+pod {
		t.Fatalf("unexpected ready signal %q", ready)
	}
	s.sig.release("defer-" + pod)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	s.noFinalizer(pod)
	s.cleanUp("sim")
}

// TestKdeferDown: kdefer's manager is down (scaled to zero) while pods end,
// Jobs and namespaces are deleted and pods are evicted; once it is back,
// nothing is lost. The cases share one outage and run side by side.
func TestKdeferDown(t *testing.T) {
	o := newOutage(t, 6)
	t.Run("JobDeletedForeground", func(t *testing.T) {
		t.Parallel()
		deletedWhileDown(t, o, "down-fg", metav1.DeletePropagationForeground)
	})
	t.Run("JobDeletedBackground", func(t *testing.T) {
		t.Parallel()
		deletedWhileDown(t, o, "down-bg", metav1.DeletePropagationBackground)
	})
	t.Run("PodEvicted", func(t *testing.T) {
		t.Parallel()
		podEvictedWhileDown(t, o)
	})
	t.Run("NamespaceDeleted", func(t *testing.T) {
		t.Parallel()
		namespaceDeletedWhileDown(t, o)
	})
	t.Run("KueueAdmits", func(t *testing.T) {
		t.Parallel()
		kueueAdmitsWhileDown(t, o)
	})
	t.Run("JobOrphaned", func(t *testing.T) {
		t.Parallel()
		jobOrphanedWhileDown(t, o)
	})
}

// kdeferDown is issue 6's set-up: a Job of two pods run one after the
// other; kdefer arms the first, then is stopped; the first ends, the Job
// controller creates the second while kdefer is down, and it runs. Returns
// the two pods.
func kdeferDown(t *testing.T, s *scenario, o *outageCase, w workload) (string, string) {
	job := s.job("sim", w)
	job.Spec.Completions = ptr.To[int32](2)
	job.Spec.Parallelism = ptr.To[int32](1)
	s.create(job)
	first := s.waitReady(time.Minute)
	s.waitRun(first, 30*time.Second, "armed", func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 })
	o.down()
	s.sig.release(first)
	second := s.waitReady(2 * time.Minute)
	if second == first {
		t.Fatal("the same pod signalled twice")
	}
	if r := s.run(second); r != nil {
		t.Fatalf("pod %s was armed while kdefer was down", second)
	}
	s.recordPVs()
	return first, second
}

func jobGone(s *scenario) {
	s.t.Helper()
	_, err := s.env.Clientset.BatchV1().Jobs(s.ns).Get(s.ctx, "sim", metav1.GetOptions{})
	if err == nil {
		s.t.Errorf("Job sim still exists")
	} else if !apierrors.IsNotFound(err) {
		s.t.Error(err)
	}
}

// deletedWhileDown: the Job is deleted with propagation while kdefer is
// down; the work PVC survives; kdefer, once back, stages out both pods.
func deletedWhileDown(t *testing.T, o *outage, prefix string, propagation metav1.DeletionPropagation) {
	s := newScenario(t, prefix)
	c := o.join(s)
	w := small
	w.mode = "wait 0"
	first, second := kdeferDown(t, s, c, w)
	if err := s.env.Clientset.BatchV1().Jobs(s.ns).Delete(s.ctx, "sim", metav1.DeleteOptions{PropagationPolicy: ptr.To(propagation)}); err != nil {
		t.Fatal(err)
	}
	// What kdefer finds after an outage: the kubelet has stopped the pod and
	// made its final, grace-0 delete (which moves deletionTimestamp to then).
	p, err := s.env.WaitPod(s.ctx, s.ns, second, time.Minute, "stopped and finally deleted by the kubelet", func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil && podStopped(p) && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 0
	})
	if err != nil {
		t.Fatal(err)
	}
	// Both work volumes must survive the outage: the second pod's (not yet
	// co-owned by kdefer) and the first's (co-owned by its DeferRun; the
	// garbage collector deletes the pod with the Job).
	s.pvcStaysGuarded(first, 5*time.Second)
	s.pvcStaysGuarded(second, time.Second)
	s.logf("pod %s stopped with the Job's %s deletion (phase %s, deletionTimestamp %s, grace 0, containers %s); its PVC is still Bound",
		second, propagation, p.Status.Phase, p.DeletionTimestamp.UTC().Format(time.RFC3339), finishes(p))
	c.up()
	s.waitManifest("sim", first, 2*time.Minute)
	s.waitManifest("sim", second, 2*time.Minute)
	s.runTrigger("sim", second, v1.TriggerDeleted)
	s.checkOutputs("sim", first, w, v1.TriggerSucceeded)
	s.checkOutputs("sim", second, w, v1.TriggerDeleted)
	s.podGone(second, time.Minute)
	s.podGone(first, time.Minute)
	s.noLeaks(2 * time.Minute)
	jobGone(s)
}

// podEvictedWhileDown: the running pod is evicted while kdefer is down.
func podEvictedWhileDown(t *testing.T, o *outage) {
	s := newScenario(t, "down-evict")
	c := o.join(s)
	w := small
	w.mode = "wait 0"
	first, second := kdeferDown(t, s, c, w)
	if err := s.env.Evict(s.ctx, s.ns, second); err != nil {
		t.Fatalf("evict %s: %v", second, err)
	}
	if _, err := s.env.WaitPod(s.ctx, s.ns, second, time.Minute, "evicted and stopped", func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil && podStopped(p)
	}); err != nil {
		t.Fatal(err)
	}
	s.pvcGuarded(second)
	c.up()
	r1 := s.waitFinished(first, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)
	r2 := s.waitFinished(second, v1.TriggerDrained, v1.DeferRunSucceeded, 2*time.Minute)
	s.checkOutputs("sim", first, w, v1.TriggerSucceeded)
	s.checkOutputs("sim", second, w, v1.TriggerDrained)
	s.volumeReleased(r1)
	s.volumeReleased(r2)
	s.podGone(second, time.Minute)
	s.cleanUp("sim")
}

// namespaceDeletedWhileDown: deleting a namespace whose managed pod runs
// while kdefer is down finishes once kdefer is back (the admission policy
// lets namespace deletion through).
func namespaceDeletedWhileDown(t *testing.T, o *outage) {
	s := newScenario(t, "down-ns")
	c := o.join(s)
	w := small
	w.mode = "hold"
	s.create(s.job("sim", w))
	pod := s.waitReady(time.Minute)
	s.recordPVs()
	c.down()
	if err := s.env.Clientset.CoreV1().Namespaces().Delete(s.ctx, s.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.env.WaitPod(s.ctx, s.ns, pod, time.Minute, "deleted and stopped", func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil && podStopped(p)
	}); err != nil {
		t.Fatal(err)
	}
	c.up()
	if err := waitNamespaceGone(s, time.Minute); err != nil {
		t.Fatal(err)
	}
	s.noLeaks(10 * time.Second)
}

// TestNamespaceDeleted: deleting a namespace whose managed pod runs ends
// its run unsaved, as docs/usage.md ("Deleting a namespace") says:
// Kubernetes creates no pod in a namespace being deleted, so there is no
// defer pod and no manifest; the run, if kdefer finishes it before the
// namespace controller deletes it, is Skipped (NamespaceDeleted), never
// Succeeded; and kdefer releases its volume and finalizers so the
// namespace goes within a minute.
func TestNamespaceDeleted(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "nsdel")
	w := small
	w.mode = "hold"
	s.create(s.job("sim", w))
	pod := s.waitReady(time.Minute)
	s.waitRun(pod, 30*time.Second, "armed", func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 })
	s.recordPVs()
	if err := s.env.Clientset.CoreV1().Namespaces().Delete(s.ctx, s.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *v1.DeferRun
	deadline := time.Now().Add(time.Minute)
	for {
		if r := s.run(pod); r != nil {
			last = r
		}
		if _, err := s.env.Clientset.CoreV1().Namespaces().Get(s.ctx, s.ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s not deleted after 1m; its run: %s", s.ns, runSummary(last))
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	s.logf("namespace %s gone; its run last seen: %s", s.ns, runSummary(last))
	state := ""
	if last != nil {
		state = last.Status.State
	}
	switch state {
	case "", v1.DeferRunArmed, v1.DeferRunTriggered: // deleted with the namespace before it could end
	case v1.DeferRunSkipped:
		if c := meta.FindStatusCondition(last.Status.Conditions, v1.DeferRunSkipped); c == nil || c.Reason != v1.ReasonNamespaceDeleted {
			t.Errorf("run %s, want Skipped for %s", runSummary(last), v1.ReasonNamespaceDeleted)
		}
	default:
		t.Errorf("run %s: a run in a namespace being deleted got a defer pod", runSummary(last))
	}
	if objs := s.objects(s.ns + "/sim/" + pod + "/"); len(objs) > 0 {
		if _, ok := objs[stagecontract.ManifestKey]; ok {
			t.Errorf("a manifest for pod %s: a run in a namespace being deleted was staged out", pod)
		}
	}
	s.noLeaks(10 * time.Second)
}

// runSummary is a run's state and conditions, for messages.
func runSummary(r *v1.DeferRun) string {
	if r == nil {
		return "never seen"
	}
	var conds []string
	for _, c := range r.Status.Conditions {
		conds = append(conds, c.Type+"="+string(c.Status)+"/"+c.Reason)
	}
	return "state " + r.Status.State + " (" + strings.Join(conds, ",") + ")"
}

func waitNamespaceGone(s *scenario, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ns, err := s.env.Clientset.CoreV1().Namespaces().Get(s.ctx, s.ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			s.logf("namespace %s gone", s.ns)
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				return errorf("namespace %s not deleted after %s: conditions %+v", s.ns, timeout, ns.Status.Conditions)
			}
			return err
		}
		time.Sleep(250 * time.Millisecond) // polling interval
	}
}

// kueueAdmitsWhileDown: Kueue admits a queued Job while kdefer is down. Its
// un-suspend is an UPDATE of an opted-in Job that touches neither the pod
// template nor the annotations, so the Job webhooks, which would refuse it
// while kdefer cannot answer, are not asked (their matchConditions): the
// Job runs, and its pod, created from the rendered template, is armed and
// staged out once kdefer is back.
func kueueAdmitsWhileDown(t *testing.T, o *outage) {
	s := newScenario(t, "down-kueue")
	c := o.join(s)
	s.useKueue()
	queue := s.kueueQueue()
	s.holdQueue(queue, "Hold")
	w := small
	w.mode = "wait 0"
	s.createQueued(s.queuedJob("sim", w, queue))
	c.down()
	s.holdQueue(queue, "None")
	s.waitWorkload("sim", "Admitted", time.Minute)
	pod := s.waitReady(2 * time.Minute)
	s.logf("Kueue admitted Job sim and its pod %s runs while kdefer is down", pod)
	c.up()
	s.sig.release(pod)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	s.cleanUp("sim")
}

// jobOrphanedWhileDown: a Job deleted with propagation Orphan while kdefer
// is down is gone while kdefer is still down: the garbage collector orphans
// its pod and removes the orphan finalizer, an UPDATE of an opted-in Job
// the Job webhooks are not asked about. The orphaned pod, armed before the
// outage, is staged out once kdefer is back.
func jobOrphanedWhileDown(t *testing.T, o *outage) {
	s := newScenario(t, "down-orphan")
	c := o.join(s)
	w := small
	w.mode = "wait 0"
	s.create(s.job("sim", w))
	pod := s.waitReady(time.Minute)
	s.waitRun(pod, 30*time.Second, "armed", func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 })
	c.down()
	if err := s.env.Clientset.BatchV1().Jobs(s.ns).Delete(s.ctx, "sim", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatal(err)
	}
	err := clusterenv.WaitFor(s.ctx, time.Minute, "Job sim gone (the garbage collector removed its orphan finalizer)", func(ctx context.Context) (bool, error) {
		_, err := s.env.Clientset.BatchV1().Jobs(s.ns).Get(ctx, "sim", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatal(err)
	}
	s.logf("Job sim gone while kdefer is down; its pod %s is orphaned", pod)
	c.up()
	s.sig.release(pod)
	// The run, its Job gone, is deleted once it has finished: the manifest
	// says it did, and with what trigger.
	s.waitManifest("sim", pod, 2*time.Minute)
	s.runTrigger("sim", pod, v1.TriggerSucceeded)
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	// An orphaned pod is nobody's to delete: kdefer lets go of it, and the
	// test deletes it.
	s.noFinalizer(pod)
	if err := s.env.Clientset.CoreV1().Pods(s.ns).Delete(s.ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.cleanUp()
}
