package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// TestResumeOf: Failed stays final unless a retry is asked (a new
// kdefer.io/retry value) or the node of a NodeLost run is Ready again, and
// either needs the volume kept; a request that cannot be granted is refused
// (consumed), never kept for later.
func TestResumeOf(t *testing.T) {
	released := metav1.Condition{Type: v1.DeferRunVolumeReleased, Status: metav1.ConditionTrue, Reason: v1.ReasonReleased, LastTransitionTime: metav1.NewTime(t0)}
	run := func(conds []metav1.Condition, f ...func(*v1.DeferRun)) *v1.DeferRun {
		r := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Obj()
		r.Status.NodeName = "n1"
		r.Status.Conditions = conds
		for _, e := range f {
			e(r)
		}
		return r
	}
	ask := func(v string) func(*v1.DeferRun) {
		return func(r *v1.DeferRun) { r.Annotations = map[string]string{v1.AnnotationRetry: v} }
	}
	handled := func(v string) func(*v1.DeferRun) {
		return func(r *v1.DeferRun) { r.Status.Retries = &v1.DeferRunRetries{Count: 1, HandledRequest: v} }
	}
	cases := map[string]struct {
		run       *v1.DeferRun
		nodeReady bool
		want      ResumeDecision
	}{
		"failed, no request":              {run(finished(v1.DeferRunFailed, v1.ReasonDeadlineExceeded, t0)), true, ResumeDecision{}},
		"failed, retry asked":             {run(finished(v1.DeferRunFailed, v1.ReasonDeadlineExceeded, t0), ask("t1")), false, ResumeDecision{Cause: v1.ReasonRetryRequested, Request: "t1"}},
		"failed, request already handled": {run(finished(v1.DeferRunFailed, v1.ReasonDeadlineExceeded, t0), ask("t1"), handled("t1")), false, ResumeDecision{}},
		"failed again, a new request":     {run(finished(v1.DeferRunFailed, v1.ReasonRetriesExhausted, t0), ask("t2"), handled("t1")), false, ResumeDecision{Cause: v1.ReasonRetryRequested, Request: "t2"}},
		"failed, volume released":         {run(append(finished(v1.DeferRunFailed, v1.ReasonDeadlineExceeded, t0), released), ask("t1")), false, ResumeDecision{Refused: "the run's work volume is released (or being released): there is nothing left to stage out", Request: "t1"}},
		"failed, release asked": {run(finished(v1.DeferRunFailed, v1.ReasonDeadlineExceeded, t0), func(r *v1.DeferRun) {
			r.Annotations = map[string]string{v1.AnnotationRetry: "t1", v1.AnnotationRelease: "true"}
		}), false, ResumeDecision{Refused: "the run's work volume is released (or being released): there is nothing left to stage out", Request: "t1"}},
		"succeeded, retry asked":           {run(finished(v1.DeferRunSucceeded, v1.ReasonSucceeded, t0), ask("t1")), false, ResumeDecision{Refused: "the run is Succeeded, not Failed: only a failed run is retried", Request: "t1"}},
		"armed, retry asked":               {run(nil, ask("t1")), false, ResumeDecision{Refused: "the run is Armed, not Failed: only a failed run is retried", Request: "t1"}},
		"NodeLost, node still away":        {run(finished(v1.DeferRunFailed, v1.ReasonNodeLost, t0)), false, ResumeDecision{}},
		"NodeLost, node Ready again":       {run(finished(v1.DeferRunFailed, v1.ReasonNodeLost, t0)), true, ResumeDecision{Cause: v1.ReasonNodeReturned}},
		"NodeLost, node back, volume gone": {run(append(finished(v1.DeferRunFailed, v1.ReasonNodeLost, t0), released)), true, ResumeDecision{}},
		"other failure, node Ready":        {run(finished(v1.DeferRunFailed, v1.ReasonDeferPodFailed, t0)), true, ResumeDecision{}},
		"NodeLost resumed, not failed again": {run(nil, func(r *v1.DeferRun) {
			r.Status.Conditions = []metav1.Condition{{Type: v1.DeferRunFailed, Status: metav1.ConditionFalse, Reason: v1.ReasonNodeReturned}}
		}), true, ResumeDecision{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.run.Status.State = v1.StateOf(&tc.run.Status)
			if d := cmp.Diff(tc.want, ResumeOf(tc.run, tc.nodeReady)); d != "" {
				t.Errorf("ResumeOf (-want +got):\n%s", d)
			}
		})
	}
}

// TestResumeStatus: the failed attempt goes into the history (at most
// maxAttemptHistory), the count goes up, the deadline counts from the
// resume, and what the next defer pod reports starts over; the steps stay.
func TestResumeStatus(t *testing.T) {
	failedAt := metav1.NewTime(t0)
	st := &v1.DeferRunStatus{
		Conditions:     finished(v1.DeferRunFailed, v1.ReasonDeadlineExceeded, t0),
		TriggeredAt:    &metav1.Time{Time: t0.Add(-time.Hour)},
		StartTime:      &metav1.Time{Time: t0.Add(-time.Hour)},
		CompletionTime: &failedAt,
		DeferPodName:   "p-defer",
		Refusals:       &v1.DeferPodRefusals{Count: 2, LastReason: "OutOfcpu"},
		Steps:          []v1.StepStatus{{Name: v1.StageOutStepName, Attempts: 1, ExitCode: ptr.To[int32](0)}},
	}
	st.Conditions[0].Message = "the defer run's deadline passed"
	now := t0.Add(time.Minute)
	ResumeStatus(st, ResumeDecision{Cause: v1.ReasonRetryRequested, Request: "t1"}, now)
	want := &v1.DeferRunRetries{Count: 1, HandledRequest: "t1", LastTime: &metav1.Time{Time: now}, History: []v1.DeferRunAttempt{{
		Reason: v1.ReasonDeadlineExceeded, Message: "the defer run's deadline passed", FailedAt: &failedAt, ResumedBy: v1.ReasonRetryRequested, Refusals: 2}}}
	if d := cmp.Diff(want, st.Retries); d != "" {
		t.Errorf("retries (-want +got):\n%s", d)
	}
	if st.CompletionTime != nil || st.StartTime != nil || st.DeferPodName != "" || st.Refusals != nil {
		t.Errorf("the last attempt's pod record was kept: %+v", st)
	}
	if len(st.Steps) != 1 || !attemptStart(st).Equal(now) || attemptOf(st) != "1" {
		t.Errorf("steps %v, attempt start %v, attempt %q; want the steps kept, %v, \"1\"", st.Steps, attemptStart(st), attemptOf(st), now)
	}
	for i := 0; i < 2*maxAttemptHistory; i++ {
		ResumeStatus(st, ResumeDecision{Cause: v1.ReasonNodeReturned}, now)
	}
	if n := len(st.Retries.History); n != maxAttemptHistory || st.Retries.Count != 2*maxAttemptHistory+1 || st.Retries.HandledRequest != "t1" {
		t.Errorf("after %d resumes: history %d, count %d, handled %q", 2*maxAttemptHistory+1, n, st.Retries.Count, st.Retries.HandledRequest)
	}
}

// TestPendingSteps: a resumed run runs from the first step that has not
// succeeded; a first attempt runs every step.
func TestPendingSteps(t *testing.T) {
	run := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
		p.DeferContainers = []corev1.Container{{Name: "notify", Image: "busybox"}, {Name: "cleanup", Image: "busybox"}}
	}).Obj()
	run.Status.Steps = []v1.StepStatus{
		{Name: v1.StageOutStepName, Attempts: 1, ExitCode: ptr.To[int32](0)},
		{Name: "notify", Attempts: 4, ExitCode: ptr.To[int32](1)},
		{Name: "cleanup"},
	}
	names := func() []string {
		var out []string
		for _, s := range Steps(run, DeferPodOptions{StageImage: "img"}) {
			out = append(out, s.Name)
		}
		return out
	}
	if got, want := names(), []string{v1.StageOutStepName, "notify", "cleanup"}; !cmp.Equal(got, want) {
		t.Errorf("first attempt: steps %v, want %v", got, want)
	}
	run.Status.Retries = &v1.DeferRunRetries{Count: 1, LastTime: &metav1.Time{Time: t0}}
	if got, want := names(), []string{"notify", "cleanup"}; !cmp.Equal(got, want) {
		t.Errorf("resumed: steps %v, want %v", got, want)
	}
	pod := BuildDeferPod(run, DeferPodOptions{StageImage: "img"})
	if pod.Annotations[v1.AnnotationAttempt] != "1" || len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != "notify" {
		t.Errorf("resumed defer pod: attempt %q, init containers %v", pod.Annotations[v1.AnnotationAttempt], pod.Spec.InitContainers)
	}
}

// TestMergeSteps: the record of a step that succeeded in an earlier attempt
// survives the new attempt's pod, which does not run it.
func TestMergeSteps(t *testing.T) {
	old := []v1.StepStatus{{Name: "stage-out", Attempts: 1, ExitCode: ptr.To[int32](0)}, {Name: "notify", Attempts: 4, ExitCode: ptr.To[int32](1)}}
	cur := []v1.StepStatus{{Name: "notify", Attempts: 1, ExitCode: ptr.To[int32](0)}}
	want := []v1.StepStatus{old[0], cur[0]}
	if d := cmp.Diff(want, mergeSteps(old, cur)); d != "" {
		t.Errorf("mergeSteps (-want +got):\n%s", d)
	}
}
