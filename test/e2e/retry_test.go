//go:build e2e

package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// TestDeadlineThenRetry: the run's deadline passes while a defer step
// waits: the run fails (DeadlineExceeded) and keeps the volume; `kdefer
// retry` resumes it from that step with a fresh deadline, the step then
// succeeds, the stage-out is not run again, and the volume is released.
// Parallel: the deadline is the run's own.
func TestDeadlineThenRetry(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "deadline-retry", timerBound())
	pol := s.holdPolicy("hold")
	// Room for the stage-out before the hold step: it took 21 s from the
	// run's start on a loaded machine (w35, 2026-12-03: 8 s to start its
	// container).
	pol.Spec.Deadline = &metav1.Duration{Duration: 45 * time.Second}
	s.create(pol)
	w := small
	w.mode = "exit 0"
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationPolicy] = "hold"
	s.create(job)
	pod := s.waitReady(time.Minute)
	// Not released: the deadline passes after the stage-out, while the hold
	// step waits, or before its container has even signalled: on a loaded
	// machine it can take longer to start than the deadline leaves (w35:
	// created 21 s and started 24 s after the run, killed at 30 s). Either
	// way the hold step is what failed; its signal, if sent, is not the
	// resumed pod's.
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunFailed, 2*time.Minute)
	s.sig.drainReady()
	if st := run.Status.Steps; len(st) < 2 || st[0].ExitCode == nil || *st[0].ExitCode != 0 {
		t.Fatalf("steps %s: want the stage-out done before the deadline", steps(run))
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed); c == nil || c.Reason != v1.ReasonDeadlineExceeded {
		t.Errorf("Failed condition %+v, want reason %s", c, v1.ReasonDeadlineExceeded)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("VolumeReleased %+v, want False (kept)", c)
	}
	s.pvcStaysGuarded(pod, time.Second)
	s.recordPVs()
	cmd := exec.CommandContext(s.ctx, program(t, "./cmd/kdefer"), "--kubeconfig", clusterenv.Dir()+"/kubeconfig", "-n", s.ns, "retry", "deferrun/"+pod)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kdefer retry: %v\n%s", err, out)
	}
	s.logf("kdefer retry: %s", strings.TrimSpace(string(out)))
	if ready := s.waitReady(2 * time.Minute); ready != "defer-"+pod {
		t.Fatalf("unexpected ready signal %q", ready)
	}
	s.sig.release("defer-" + pod)
	run = s.waitRun(pod, 2*time.Minute, "to succeed after the retry", func(r *v1.DeferRun) bool { return r.Status.State == v1.DeferRunSucceeded })
	s.logf("after the retry: %s", steps(run))
	if rt := run.Status.Retries; rt == nil || rt.Count != 1 || len(rt.History) != 1 {
		t.Errorf("status.retries %+v: want one resume, one failed attempt in the history", rt)
	}
	// The stage-out succeeded in the first attempt: the resumed pod ran the
	// hold step alone.
	if len(run.Status.Steps) == 0 || run.Status.Steps[0].Attempts != 1 {
		t.Errorf("steps %s: want the stage-out's one attempt", steps(run))
	}
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	s.cleanUp("sim")
}
