//go:build e2e

package e2e

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// burstPods is issue #14's burst: 40 pods ending at once on the 2-core node
// once left two defer pods refused OutOfcpu (50m each, 2000m of 2000m used).
const burstPods = 40

// TestBurst: a Job's 40 pods run side by side and end at the same moment;
// every one of the 40 defer pods is admitted by the kubelet (none refused,
// none evicted), and all 40 manifests are in the bucket. Serial, before the
// parallel scenarios: the burst holds 40 of the node's 48 local PVs, and 40
// pods starting at once load the whole machine, not only their node (on a
// node of its own beside the others, 2026-12-02: 330 s instead of 116 s, every
// other scenario 2-4 times slower, load average 66, one namespace not
// deleted within a minute).
func TestBurst(t *testing.T) {
	s := newScenario(t, "burst")
	w := small
	w.mode = "wait 0"
	job := s.job("burst", w)
	job.Spec.Completions = ptr.To[int32](burstPods)
	job.Spec.Parallelism = ptr.To[int32](burstPods)
	s.create(job)
	// 40 pods started on a 2-core node, each binding a local PV: under a
	// minute when the machine is quiet; the rest is for a loaded one.
	pods := make([]string, 0, burstPods)
	for range burstPods {
		pods = append(pods, s.waitReady(4*time.Minute))
	}
	s.recordPVs()
	for _, p := range pods {
		s.sig.release(p)
	}
	s.logf("released %d pods at once", len(pods))
	refused := 0
	for _, p := range pods {
		// 40 defer pods started at once share the two cores.
		run := s.waitFinished(p, v1.TriggerSucceeded, v1.DeferRunSucceeded, 4*time.Minute)
		if r := run.Status.Refusals; r != nil {
			refused++
			t.Errorf("DeferRun %s: the node refused %d defer pods (last: %s: %s)", p, r.Count, r.LastReason, r.LastMessage)
		}
		s.checkOutputs("burst", p, w, v1.TriggerSucceeded)
		s.volumeReleased(run)
	}
	s.logf("%d of %d runs staged out, %d with a refused defer pod", len(pods), burstPods, refused)
	s.cleanUp("burst")
}
