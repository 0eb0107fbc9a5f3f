//go:build e2e

package e2e

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/test/clusterenv"
	"github.com/kdefer/kdefer/test/s3server"
)

// Owners other than a plain Job (issue #17): a CI runner's bare pod, a
// CronJob's Jobs, an Indexed Job with backoffLimitPerIndex and a
// podFailurePolicy (Ignore on a disruption; FailJob on an exit code).

// shortTTL makes finished runs of owners without a Job go soon, so that
// cleanUp finds nothing left (a bare pod's run is deleted by its TTL only).
func (s *scenario) shortTTL(name string) *v1.DeferPolicy {
	return &v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		// A policy needs a stage-out (or defer containers); the pod's
		// own annotation still wins over it.
		Spec: v1.DeferPolicySpec{TTLSecondsAfterFinished: ptr.To[int32](5), StageOut: &v1.StageOut{URL: s.stageOutURL()}},
	}
}

// TestBareCIPodEvicted: examples/ci-runner/pod.yaml, a CI runner's build
// pod, no Job, opted in as GitLab Runner's pod_labels and pod_annotations do,
// writes its JUnit XML and is evicted during its long integration suite; the
// pod webhook rendered it at creation, so the report (only it: the example's
// include) is in the bucket under NAMESPACE/POD/UID/, the volume is released
// and nothing is left.
func TestBareCIPodEvicted(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "ci-pod")
	s.create(s.shortTTL("ci"))
	pod := &corev1.Pod{}
	s.fromExample("ci-runner/pod.yaml", pod)
	// A bare pod's run goes only with its policy's TTL: this one's at once,
	// so that cleanUp finds nothing left. The pod's annotations win over it.
	pod.Annotations[v1.AnnotationPolicy] = "ci"
	s.create(pod)
	name := pod.Name
	if pod.Labels[v1.LabelManaged] != "true" || pod.Spec.Volumes[0].Ephemeral == nil {
		t.Fatalf("the pod was not rendered at creation: labels %v, volume %+v", pod.Labels, pod.Spec.Volumes[0])
	}
	s.waitLog(name, "unit tests: report written", 2*time.Minute)
	if err := s.env.Evict(s.ctx, s.ns, name); err != nil {
		t.Fatalf("evict %s: %v", name, err)
	}
	run := s.waitFinished(name, v1.TriggerDrained, v1.DeferRunSucceeded, 3*time.Minute)
	if run.Spec.JobName != "" {
		t.Errorf("DeferRun %s: job %q, want none", name, run.Spec.JobName)
	}
	const report = "group/project/reports/junit-unit.xml"
	objs := s.checkExample(s.ns+"/"+name+"/"+string(pod.UID)+"/", v1.TriggerDrained, report)
	var suites struct {
		XMLName  xml.Name
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Cases    []struct {
			Name string `xml:"name,attr"`
		} `xml:"testsuite>testcase"`
	}
	if err := xml.Unmarshal(objs[report].data, &suites); err != nil || suites.XMLName.Local != "testsuites" || suites.Tests != 3 || suites.Failures != 1 || len(suites.Cases) != 3 {
		t.Errorf("%s in the bucket: %+v (%v), want the example's testsuites of 3 tests, 1 failure:\n%s", report, suites, err, objs[report].data)
	}
	// The build container's log, the CI job's log, is in the bucket to
	// its last line (checkManifest: no log of the pod is missing), and
	// `kdefer logs` prints it from there, with the caller's credentials.
	buildLog := string(objs[stagecontract.LogKey(name, stagecontract.LogRef{Container: "build"})].data)
	for _, line := range []string{"unit tests: report written", "integration tests: running", "integration suite stopped by SIGTERM"} {
		if !strings.Contains(buildLog, line) {
			t.Errorf("the build log in the bucket lacks %q:\n%s", line, buildLog)
		}
	}
	cmd := exec.CommandContext(s.ctx, program(t, "./cmd/kdefer"), "--kubeconfig", clusterenv.Dir()+"/kubeconfig", "-n", s.ns, "logs", "deferrun/"+name, "-c", "build", "--archived")
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s3server.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3server.SecretKey)
	if out, err := cmd.Output(); err != nil || string(out) != "==> "+name+"/build <==\n"+buildLog {
		t.Errorf("kdefer logs deferrun/%s -c build --archived: %v: printed %q, want the archived log %q", name, err, out, buildLog)
	}
	s.volumeReleased(run)
	s.podGone(name, time.Minute)
	s.cleanUp()
}

// TestCronJob: a CronJob whose jobTemplate opts in makes Jobs the Job
// webhook renders; the first Job's pod stages out like any Job's.
func TestCronJob(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "cron")
	w := small
	w.mode = "exit 0"
	job := s.job("nightly", w)
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: s.ns},
		Spec: batchv1.CronJobSpec{
			Schedule: "* * * * *", ConcurrencyPolicy: batchv1.ForbidConcurrent,
			SuccessfulJobsHistoryLimit: ptr.To[int32](1), FailedJobsHistoryLimit: ptr.To[int32](1),
			JobTemplate: batchv1.JobTemplateSpec{ObjectMeta: job.ObjectMeta, Spec: job.Spec},
		},
	}
	cj.Spec.JobTemplate.Name, cj.Spec.JobTemplate.Namespace = "", ""
	s.create(cj)
	pod := s.waitReady(3 * time.Minute) // the schedule fires within a minute
	// Stop further runs before looking: one Job is the scenario.
	if err := s.env.Client.Patch(s.ctx, cj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`))); err != nil {
		t.Fatal(err)
	}
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	if !strings.HasPrefix(run.Spec.JobName, "nightly-") {
		t.Errorf("DeferRun %s: job %q, want one of CronJob nightly's", pod, run.Spec.JobName)
	}
	s.checkOutputs(run.Spec.JobName, pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	if err := s.env.Client.Delete(s.ctx, cj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	s.cleanUp(run.Spec.JobName)
}

// TestIndexedJobBackoffPerIndex: an Indexed Job with backoffLimitPerIndex 1
// and a podFailurePolicy that ignores disruptions. Index 0's first pod is
// evicted (ignored by the policy: not counted, replaced), index 1's first
// pod exits 1 (counted against its index, retried); every attempt has its
// own run and outputs, and with kdefer's finalizer on each pod the Job
// completes with exactly one failure counted and no failed index.
func TestIndexedJobBackoffPerIndex(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "indexed", timerBound())
	w := small
	w.mode = "wait 0"
	job := s.job("sweep", w)
	job.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	job.Spec.Completions, job.Spec.Parallelism = ptr.To[int32](2), ptr.To[int32](2)
	job.Spec.BackoffLimit = nil
	job.Spec.BackoffLimitPerIndex = ptr.To[int32](1)
	job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
	}}}
	c := &job.Spec.Template.Spec.Containers[0]
	// An Indexed Job's pod has the hostname job-index, not its name: the
	// workload signals the test with its pod name instead.
	c.Env = []corev1.EnvVar{
		{Name: "FAILURES", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.annotations['batch.kubernetes.io/job-index-failure-count']"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
	// Index 1's first attempt exits 1 once its outputs are written; every
	// pod of index 0 waits for the test, which evicts the first and
	// releases the second.
	script := strings.ReplaceAll(w.script(s.sig.url), "$HOSTNAME", "$POD_NAME")
	wait := strings.Index(script, "timeout 600 wget")
	if wait < 0 {
		t.Fatal("workload script changed: no wait for the go signal")
	}
	c.Command[2] = script[:wait] + `if [ "$JOB_COMPLETION_INDEX" = 1 ]; then [ "${FAILURES:-0}" = 0 ] && exit 1; exit 0; fi
` + script[wait:]
	s.create(job)

	evicted := ""
	for {
		p := s.waitReady(3 * time.Minute)
		pod := &corev1.Pod{}
		if err := s.env.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: p}, pod); err != nil {
			t.Fatal(err)
		}
		if pod.Annotations[batchv1.JobCompletionIndexAnnotation] != "0" {
			continue
		}
		if evicted == "" {
			if err := s.env.Evict(s.ctx, s.ns, p); err != nil {
				t.Fatalf("evict %s: %v", p, err)
			}
			evicted = p
			continue
		}
		s.sig.release(p)
		break
	}
	s.waitJob("sweep", 4*time.Minute, "Complete", func(j *batchv1.Job) bool {
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	j := &batchv1.Job{}
	if err := s.env.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: "sweep"}, j); err != nil {
		t.Fatal(err)
	}
	// The eviction is ignored by the policy; index 1's exit 1 is the one
	// failure, within its index's backoff.
	if j.Status.Failed != 1 || j.Status.Succeeded != 2 || (j.Status.FailedIndexes != nil && *j.Status.FailedIndexes != "") {
		t.Errorf("Job status: failed %d succeeded %d failedIndexes %v, want 1, 2, none", j.Status.Failed, j.Status.Succeeded, ptr.Deref(j.Status.FailedIndexes, ""))
	}
	// Every attempt (2 first pods, 2 retries) had its own run, each
	// staged out its outputs under its own pod's prefix, and each says
	// why its attempt ended: index 0's first was evicted, index 1's first
	// failed, both retries succeeded.
	runs := &v1.DeferRunList{}
	if err := s.env.Client.List(s.ctx, runs, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 4 {
		t.Errorf("%d DeferRuns, want 4 (one per attempt)", len(runs.Items))
	}
	attempts := map[string][]string{}
	for i := range runs.Items {
		r := s.waitRun(runs.Items[i].Name, 3*time.Minute, "to finish", finished)
		if r.Spec.CompletionIndex == nil {
			t.Errorf("DeferRun %s has no completion index", r.Name)
			continue
		}
		if r.Status.State != v1.DeferRunSucceeded {
			t.Errorf("DeferRun %s: state %q, want %s (conditions %s)", r.Name, r.Status.State, v1.DeferRunSucceeded, runConds(r))
		}
		idx := fmt.Sprint(*r.Spec.CompletionIndex)
		attempts[idx] = append(attempts[idx], string(r.Status.Trigger))
		s.checkOutputs("sweep", r.Name, w, r.Status.Trigger)
		s.volumeReleased(r)
	}
	for _, a := range attempts {
		slices.Sort(a)
	}
	want := map[string][]string{"0": {string(v1.TriggerDrained), string(v1.TriggerSucceeded)}, "1": {string(v1.TriggerFailed), string(v1.TriggerSucceeded)}}
	if diff := cmp.Diff(want, attempts); diff != "" {
		t.Errorf("triggers of each index's attempts (-want +got):\n%s", diff)
	}
	s.cleanUp("sweep")
}

// TestJobFailurePolicyFailJob: a Job whose podFailurePolicy fails the whole
// Job on exit code 3. One pod exits 3; the Job controller then deletes its
// running sibling. kdefer's finalizer on both pods must not hold the Job
// controller up: the Job ends Failed by the policy (not by its backoff
// limit, which is far away), while each pod still gets its own run, the
// failed one for its exit, the sibling for its deletion, and both outputs
// are in the bucket.
func TestJobFailurePolicyFailJob(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "failjob")
	w := small
	w.mode = "wait 3"
	job := s.job("crash", w)
	job.Spec.Completions, job.Spec.Parallelism = ptr.To[int32](2), ptr.To[int32](2)
	job.Spec.BackoffLimit = ptr.To[int32](6)
	job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action: batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: ptr.To("main"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{3}},
	}}}
	s.create(job)
	// Both pods' outputs are written before either ends, so the sibling's
	// deletion cuts nothing short.
	failing, sibling := s.waitReady(3*time.Minute), s.waitReady(3*time.Minute)
	s.sig.release(failing)

	s.waitJob("crash", 3*time.Minute, "Failed by its podFailurePolicy", func(j *batchv1.Job) bool {
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				if c.Reason != batchv1.JobReasonPodFailurePolicy {
					t.Errorf("Job failed with reason %q (%s), want %s", c.Reason, c.Message, batchv1.JobReasonPodFailurePolicy)
				}
				return true
			}
		}
		return false
	})
	for pod, trigger := range map[string]v1.Trigger{failing: v1.TriggerFailed, sibling: v1.TriggerDeleted} {
		run := s.waitFinished(pod, trigger, v1.DeferRunSucceeded, 3*time.Minute)
		if run.Spec.JobName != "crash" {
			t.Errorf("DeferRun %s: job %q, want crash", pod, run.Spec.JobName)
		}
		s.checkOutputs("crash", pod, w, trigger)
		s.volumeReleased(run)
	}
	j := &batchv1.Job{}
	if err := s.env.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: "crash"}, j); err != nil {
		t.Fatal(err)
	}
	if j.Status.Succeeded != 0 || j.Status.Active != 0 {
		t.Errorf("Job status: succeeded %d active %d, want 0, 0", j.Status.Succeeded, j.Status.Active)
	}
	s.cleanUp("crash")
}

// waitJob waits until the Job satisfies cond.
func (s *scenario) waitJob(name string, timeout time.Duration, what string, cond func(*batchv1.Job) bool) {
	s.t.Helper()
	err := clusterenv.WaitFor(s.ctx, timeout, fmt.Sprintf("Job %s/%s %s", s.ns, name, what), func(ctx context.Context) (bool, error) {
		j := &batchv1.Job{}
		if err := s.env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, j); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return cond(j), nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}
