//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// What the defer steps do: retries of one step, and per-trigger rules.

// TestStepRetried: a defer step that fails twice, then succeeds, is retried
// alone (the kubelet restarts only that container of the defer pod): the
// stage-out before it and the step after it run once, and the run succeeds.
// The steps' logs, the failed attempt's too, are in the bucket.
func TestStepRetried(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "retry", timerBound())
	busybox := clusterenv.MustImage(t, "busybox")
	// The attempt number comes from the test's counter: a restarted
	// container starts with a fresh file system.
	flaky := fmt.Sprintf(`n=$(timeout 20 wget -q -O - %s/count/flaky-$KDEFER_POD) || exit 7
echo "attempt $n"
[ "$n" -ge 3 ] || exit 7`, s.sig.url)
	s.create(&v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "flaky", Namespace: s.ns},
		Spec: v1.DeferPolicySpec{DeferContainers: []corev1.Container{
			{Name: "flaky", Image: busybox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sh", "-c", flaky}},
			{Name: "after", Image: busybox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"true"}},
		}},
	})
	w := small
	w.mode = "exit 0"
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationPolicy] = "flaky"
	s.create(job)
	pod := s.waitReady(time.Minute)
	// Two kubelet restart back-offs (10 s, 20 s) besides the run itself.
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	want := map[string]int32{v1.StageOutStepName: 1, "flaky": 3, "after": 1}
	if len(run.Status.Steps) != len(want) {
		t.Errorf("steps %s: want stage-out, flaky, after", steps(run))
	}
	for _, st := range run.Status.Steps {
		if st.Attempts != want[st.Name] || st.ExitCode == nil || *st.ExitCode != 0 {
			t.Errorf("step %s: %d attempts, exit %v; want %d attempts, exit 0 (steps %s)", st.Name, st.Attempts, st.ExitCode, want[st.Name], steps(run))
		}
	}
	objs := s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	// The defer containers' logs, archived by the stage-logs sidecar as the
	// pod ended, after the manifest, and listed in the steps' list: each
	// step's last attempt, and the one before where the kubelet still has
	// it. The defer steps are init containers, and the kubelet removes an
	// init container's dead attempts when it starts the next one
	// (pruneInitContainersBeforeStart), so the attempt before is usually
	// gone: then the sidecar names it with the kubelet's answer instead.
	dp := v1.DeferPodName(run)
	sl := s.stepLogs(objs, dp)
	if sl == nil {
		t.Fatalf("no %s: the defer containers' logs were not archived", stagecontract.StepLogsKey(dp))
	}
	for _, want := range []struct {
		ref  stagecontract.LogRef
		body string
	}{{stagecontract.LogRef{Container: "flaky"}, "attempt 3\n"}, {stagecontract.LogRef{Container: "after"}, ""}} {
		key := stagecontract.LogKey(dp, want.ref)
		if o, ok := objs[key]; !ok || string(o.data) != want.body {
			t.Errorf("%s: %q (stored %v), want %q; steps' list %+v", key, o.data, ok, want.body, sl)
		}
	}
	prev := stagecontract.LogRef{Container: "flaky", Previous: true}
	named := false
	for _, w := range sl.LogWarnings {
		if w.Container == prev.Container && w.Previous && w.Reason != "" {
			named = true
		} else {
			t.Errorf("the sidecar could not archive %+v", w)
		}
	}
	if o, ok := objs[stagecontract.LogKey(dp, prev)]; ok == named || (ok && string(o.data) != "attempt 2\n") {
		t.Errorf("flaky's attempt before the last: stored %v (%q), named as missing %v; want one of them (%q if stored)", ok, o.data, named, "attempt 2\n")
	}
	s.logf("flaky's attempt before the last: archived %v, named as removed by the kubelet %v", !named, named)
	s.volumeReleased(run)
	s.cleanUp("sim")
}

// logFile is what the trigger-rules scenario's pods write besides out/.
const logFile = "logs/run.log"

// TestTriggerRules: one policy, two outcomes. Its rule for Failed uploads
// only logs/**; Evicted, which no rule lists, uploads everything. One Job
// exits 3, the other is evicted by the kubelet (ephemeral-storage limit).
func TestTriggerRules(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "rules")
	s.create(&v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "rules", Namespace: s.ns},
		Spec: v1.DeferPolicySpec{
			StageOut:     &v1.StageOut{URL: s.stageOutURL()},
			TriggerRules: []v1.TriggerRule{{Triggers: []v1.Trigger{v1.TriggerFailed}, Include: []string{"logs/**"}}},
		},
	})
	failed, evicted := small, small
	failed.mode, evicted.mode = "exit 3", "fill"
	for name, w := range map[string]workload{"failed": failed, "evicted": evicted} {
		job := s.job(name, w)
		job.Annotations[v1.AnnotationPolicy] = "rules"
		c := &job.Spec.Template.Spec.Containers[0]
		c.Command[2] = "mkdir -p /kdefer/logs && echo \"log of $HOSTNAME\" > /kdefer/" + logFile + "\n" + c.Command[2]
		if name == "evicted" {
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: mustQ("4Mi")}
		}
		s.create(job)
	}
	pods := map[string]string{}
	for range 2 {
		p := s.waitReady(2 * time.Minute)
		pods[p[:strings.LastIndex(p, "-")]] = p
	}
	fp, ep := pods["failed"], pods["evicted"]
	if fp == "" || ep == "" {
		t.Fatalf("ready pods %v, want one of each Job", pods)
	}
	fr := s.waitFinished(fp, v1.TriggerFailed, v1.DeferRunSucceeded, 3*time.Minute)
	er := s.waitFinished(ep, v1.TriggerEvicted, v1.DeferRunSucceeded, 3*time.Minute)
	// Failed: the rule's include replaced the stage-out's (everything).
	prefix := s.ns + "/failed/" + fp + "/"
	objs := s.objects(prefix)
	s.checkManifest(prefix, objs, []string{logFile}, v1.TriggerFailed)
	if got, want := string(objs[logFile].data), "log of "+fp+"\n"; got != want {
		t.Errorf("%s%s: %q, want %q", prefix, logFile, got, want)
	}
	// Evicted: every file, the log included.
	objs = s.checkOutputs("evicted", ep, evicted, v1.TriggerEvicted, logFile)
	if got, want := string(objs[logFile].data), "log of "+ep+"\n"; got != want {
		t.Errorf("evicted %s: %q, want %q", logFile, got, want)
	}
	// The kubelet removes an evicted pod's containers, and their logs, as
	// they stop; the node agent kept them: checkManifest found the log.
	if _, ok := objs[stagecontract.LogKey(ep, stagecontract.LogRef{Container: "main"})]; !ok {
		t.Errorf("evicted pod %s: no log of its main container in the bucket", ep)
	}
	s.volumeReleased(fr)
	s.volumeReleased(er)
	s.cleanUp("failed", "evicted")
}
