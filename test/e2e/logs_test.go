//go:build e2e

package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
)

// TestRestartedContainerEvicted: a container that failed once and was
// restarted in place (restartPolicy OnFailure), then its pod evicted through
// the Eviction API while it prints a line every 50 ms. The kubelet removes
// both attempts' log files as the container stops; both are in the bucket:
// main.previous.log is the first attempt, main.log the second up to its
// last line, together every byte it printed (checkMirroredLogs).
func TestRestartedContainerEvicted(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "restarted")
	w := small
	w.mode = "hold"
	job := s.job("sim", w)
	// The first attempt prints two lines (mirrored as say does) and fails.
	c := &job.Spec.Template.Spec.Containers[0]
	c.Command[2] = `if [ ! -e /kdefer/first-attempt ]; then
mkdir -p /kdefer/` + stdoutMirrorDir + `
: >/kdefer/first-attempt
for l in "attempt 1 starts" "attempt 1 fails"; do echo "$l"; echo "$l" >>/kdefer/` + stdoutMirrorDir + `main.txt; done
exit 1
fi
` + c.Command[2]
	job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	// The Job counts a restart in place as a failure.
	job.Spec.BackoffLimit = ptr.To[int32](2)
	s.create(job)
	pod := s.waitReady(2 * time.Minute)
	// The kubelet reports the restart a moment after the second attempt
	// may have signalled.
	if _, err := s.env.WaitPod(s.ctx, s.ns, pod, 30*time.Second, "restarted once", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // some ticks
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: s.ns}}
	if err := s.env.Clientset.PolicyV1().Evictions(s.ns).Evict(s.ctx, ev); err != nil {
		t.Fatalf("evict %s: %v", pod, err)
	}
	run := s.waitFinished(pod, v1.TriggerDrained, v1.DeferRunSucceeded, 3*time.Minute)
	objs := s.checkOutputs("sim", pod, w, v1.TriggerDrained, "first-attempt")
	for _, ref := range []stagecontract.LogRef{{Container: "main", Previous: true}, {Container: "main"}} {
		if _, ok := objs[stagecontract.LogKey(pod, ref)]; !ok {
			t.Errorf("no %s in the bucket", stagecontract.LogKey(pod, ref))
		}
	}
	s.volumeReleased(run)
	s.podGone(pod, time.Minute)
	s.cleanUp("sim")
}
