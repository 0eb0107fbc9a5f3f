//go:build e2e

package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// TestDrainDuringStageSteps: with defer containers, stage-out and every step
// but the last run as init containers, so the defer pod is Pending while they
// run, and the Eviction API ignores PodDisruptionBudgets of Pending pods.
// kdefer's eviction webhook answers 429 instead, so `kubectl drain` waits
// for the steps rather than killing the stage-out; once the pod has ended,
// the drain completes.
func TestDrainDuringStageSteps(t *testing.T) {
	s := newScenario(t, "drainsteps", onNode(reserveNode(t, nodeDrain)))
	pol := s.holdPolicy("steps")
	busybox := clusterenv.MustImage(t, "busybox")
	pol.Spec.DeferContainers = append(pol.Spec.DeferContainers, corev1.Container{
		Name: "last", Image: busybox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"true"}})
	s.create(pol)
	w := small
	w.mode = "hold"
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationPolicy] = "steps"
	s.create(job)
	pod := s.waitReady(time.Minute)
	if err := s.env.Clientset.CoreV1().Pods(s.ns).Delete(s.ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ready := s.waitReady(2 * time.Minute); ready != "defer-"+pod {
		t.Fatalf("unexpected ready signal %q", ready)
	}
	// The hold step (an init container) runs: stage-out is done, the pod is Pending.
	run := s.waitRun(pod, 30*time.Second, "with a defer pod", inProgress)
	dp, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(s.ctx, run.Status.DeferPodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dp.Status.Phase != corev1.PodPending {
		t.Fatalf("defer pod %s is %s during its init steps, want Pending (the case budgets do not cover)", dp.Name, dp.Status.Phase)
	}
	if err := s.env.Evict(s.ctx, s.ns, dp.Name); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting the Pending defer pod: %v, want 429 from kdefer's eviction webhook", err)
	}
	d := s.drain("kdefer.io/deferrun=" + pod)
	d.waitLine(t, "evictions.pods.kdefer.io", 30*time.Second)
	s.logf("drain waits for the Pending defer pod %s (eviction webhook)", dp.Name)
	if !d.running() {
		t.Fatalf("drain ended while the defer steps ran:\n%s", d.output())
	}
	// Refused, not evicted: the same pod still runs its steps. (Once it has
	// ended, drain's next retry may delete it: that is fine.)
	now, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(s.ctx, dp.Name, metav1.GetOptions{})
	if err != nil || now.UID != dp.UID || now.DeletionTimestamp != nil {
		t.Fatalf("the Pending defer pod was evicted or replaced while drain retried: %v", err)
	}
	s.sig.release("defer-" + pod)
	d.wait(t, 2*time.Minute)
	s.uncordon()
	run = s.waitFinished(pod, v1.TriggerDeleted, v1.DeferRunSucceeded, 2*time.Minute)
	s.checkOutputs("sim", pod, w, v1.TriggerDeleted)
	s.volumeReleased(run)
	s.podGone(pod, time.Minute)
	s.cleanUp("sim")
}
