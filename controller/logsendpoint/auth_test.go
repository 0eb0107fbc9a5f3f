package logsendpoint_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/logsendpoint"
	"github.com/kdefer/kdefer/stagecontract"
)

func reviewed(user string, extra map[string]authnv1.ExtraValue, aud ...string) authnv1.TokenReviewStatus {
	return authnv1.TokenReviewStatus{Authenticated: true, Audiences: aud, User: authnv1.UserInfo{Username: user, Extra: extra}}
}

func TestClaimsOf(t *testing.T) {
	bound := map[string]authnv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"r-defer"}, "authentication.kubernetes.io/pod-uid": {"u1"}}
	c, err := logsendpoint.ClaimsOf(reviewed("system:serviceaccount:ns:default", bound, stagecontract.LogsAudience))
	if err != nil || c != (logsendpoint.LogsClaims{Namespace: "ns", ServiceAccount: "default", PodName: "r-defer", PodUID: "u1"}) {
		t.Fatalf("claims = %+v, %v", c, err)
	}
	for name, st := range map[string]authnv1.TokenReviewStatus{
		"not authenticated":      {Audiences: []string{stagecontract.LogsAudience}, User: authnv1.UserInfo{Username: "system:serviceaccount:ns:default", Extra: bound}},
		"apiserver audience":     reviewed("system:serviceaccount:ns:default", bound, "https://kubernetes.default.svc"),
		"a person":               reviewed("alice", bound, stagecontract.LogsAudience),
		"not bound to a pod":     reviewed("system:serviceaccount:ns:default", nil, stagecontract.LogsAudience),
		"service account no ns":  reviewed("system:serviceaccount:default", bound, stagecontract.LogsAudience),
		"two pod names in extra": reviewed("system:serviceaccount:ns:default", map[string]authnv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"a", "b"}, "authentication.kubernetes.io/pod-uid": {"u1"}}, stagecontract.LogsAudience),
	} {
		if c, err := logsendpoint.ClaimsOf(st); err == nil {
			t.Errorf("%s: accepted as %+v", name, c)
		}
	}
}

// logsCase is a triggered run with logs on and its defer pod, as kdefer
// makes them.
func logsCase() (logsendpoint.LogsClaims, *corev1.Pod, *v1.DeferRun, *corev1.Pod) {
	trig := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	run := &v1.DeferRun{ObjectMeta: metav1.ObjectMeta{Name: "job-abc", Namespace: "ns", UID: "run-uid"},
		Spec:   v1.DeferRunSpec{PodName: "job-abc", PodUID: "ended-uid", Policy: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/{pod}"}}},
		Status: v1.DeferRunStatus{NodeName: "n1", TriggeredAt: &trig}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: v1.DeferPodName(run), Namespace: "ns", UID: "defer-uid",
		CreationTimestamp: metav1.NewTime(trig.Add(time.Second)),
		Annotations:       map[string]string{v1.AnnotationDeferRunName: run.Name, v1.AnnotationDeferRunUID: string(run.UID)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1.GroupVersion.String(), Kind: "DeferRun", Name: run.Name, UID: run.UID,
			Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "n1"}}
	ended := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: run.Spec.PodName, Namespace: "ns", UID: "ended-uid"},
		Spec: corev1.PodSpec{NodeName: "n1"}}
	return logsendpoint.LogsClaims{Namespace: "ns", ServiceAccount: "default", PodName: pod.Name, PodUID: "defer-uid"}, pod, run, ended
}

// Only the run's own defer pod, as kdefer made it, may read the ended
// pod's logs.
func TestAuthorizeLogs(t *testing.T) {
	c, pod, run, ended := logsCase()
	if err := logsendpoint.AuthorizeLogs(c, pod, run, ended); err != nil {
		t.Fatalf("the run's defer pod refused: %v", err)
	}
	// The stage step asks before the run's bookkeeping has written its
	// status (node, trigger time): the ended pod's node stands in.
	run.Status.NodeName, run.Status.TriggeredAt = "", nil
	if err := logsendpoint.AuthorizeLogs(c, pod, run, ended); err != nil {
		t.Fatalf("the run's defer pod refused before the run's status is written: %v", err)
	}
	for name, tc := range map[string]struct {
		edit func(*logsendpoint.LogsClaims, *corev1.Pod, *v1.DeferRun)
		want string
	}{
		"token of a deleted and recreated pod": {func(c *logsendpoint.LogsClaims, _ *corev1.Pod, _ *v1.DeferRun) { c.PodUID = "old" }, "gone"},
		"token from another namespace":         {func(c *logsendpoint.LogsClaims, _ *corev1.Pod, _ *v1.DeferRun) { c.Namespace = "other" }, "gone"},
		"another service account":              {func(c *logsendpoint.LogsClaims, _ *corev1.Pod, _ *v1.DeferRun) { c.ServiceAccount = "builder" }, "service account"},
		"a pod that names a run it is not of": {func(_ *logsendpoint.LogsClaims, p *corev1.Pod, _ *v1.DeferRun) {
			p.OwnerReferences = nil
			p.Annotations[v1.AnnotationDeferRunUID] = "another-run"
		}, "not the defer pod"},
		"a tenant's pod named like the defer pod but unowned": {func(_ *logsendpoint.LogsClaims, p *corev1.Pod, _ *v1.DeferRun) {
			p.OwnerReferences, p.Annotations = nil, nil
		}, "not the defer pod"},
		"the defer pod's name of another run": {func(c *logsendpoint.LogsClaims, p *corev1.Pod, _ *v1.DeferRun) {
			p.Name, c.PodName = "other-defer", "other-defer"
		}, "not the defer pod"},
		"on another node": {func(_ *logsendpoint.LogsClaims, p *corev1.Pod, _ *v1.DeferRun) { p.Spec.NodeName = "n2" }, "node"},
		"status not written, pod on another node than the ended pod's": {func(_ *logsendpoint.LogsClaims, p *corev1.Pod, r *v1.DeferRun) {
			r.Status.NodeName, r.Status.TriggeredAt = "", nil
			p.Spec.NodeName = "n2"
		}, "node"},
		"pod created before the trigger": {func(_ *logsendpoint.LogsClaims, p *corev1.Pod, r *v1.DeferRun) {
			p.CreationTimestamp = metav1.NewTime(r.Status.TriggeredAt.Add(-time.Minute))
		}, "triggered"},
		"logs off in the policy": {func(_ *logsendpoint.LogsClaims, _ *corev1.Pod, r *v1.DeferRun) {
			r.Spec.Policy.StageOut.Logs = &v1.StageOutLogs{Enabled: ptr.To(false)}
		}, "logs"},
		"no stage-out":                        {func(_ *logsendpoint.LogsClaims, _ *corev1.Pod, r *v1.DeferRun) { r.Spec.Policy.StageOut = nil }, "logs"},
		"run in another namespace than token": {func(_ *logsendpoint.LogsClaims, _ *corev1.Pod, r *v1.DeferRun) { r.Namespace = "other" }, "namespace"},
	} {
		c, pod, run, ended := logsCase()
		tc.edit(&c, pod, run)
		err := logsendpoint.AuthorizeLogs(c, pod, run, ended)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", name, err, tc.want)
		}
	}
}

// Every container's log, init containers first, and the previous attempt's
// of those that restarted.
func TestLogsIndexOf(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "setup"}}, Containers: []corev1.Container{{Name: "main"}, {Name: "side"}}},
		Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{Name: "setup"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", RestartCount: 2}, {Name: "side"}}}}
	got := logsendpoint.LogsIndexOf(pod)
	want := []stagecontract.LogRef{{Container: "setup"}, {Container: "main"}, {Container: "main", Previous: true}, {Container: "side"}}
	if got.Pod != "p" || len(got.Logs) != len(want) {
		t.Fatalf("index = %+v, want %+v", got, want)
	}
	for i := range want {
		if got.Logs[i] != want[i] {
			t.Errorf("log %d = %+v, want %+v", i, got.Logs[i], want[i])
		}
	}
	// Under restartPolicy Never a restart count is the kubelet's for a
	// container it lost (ContainerStatusUnknown after an eviction): there is
	// no attempt before, and listing one would be a warning about a log
	// that never was. A native sidecar still restarts.
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.InitContainers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	pod.Status.InitContainerStatuses[0].RestartCount = 1
	got = logsendpoint.LogsIndexOf(pod)
	want = []stagecontract.LogRef{{Container: "setup"}, {Container: "setup", Previous: true}, {Container: "main"}, {Container: "side"}}
	if !slices.Equal(got.Logs, want) {
		t.Errorf("index under restartPolicy Never = %+v, want %+v", got.Logs, want)
	}
}

// The stage-logs sidecar gets the defer containers' logs, every attempt,
// not the built-in containers'.
func TestStepLogsIndexOf(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r-defer"},
		Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: v1.StageOutStepName}, {Name: v1.StageLogsName}, {Name: "flaky"}},
			Containers: []corev1.Container{{Name: "after"}}},
		Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{Name: v1.StageOutStepName, RestartCount: 1}, {Name: v1.StageLogsName}, {Name: "flaky", RestartCount: 2}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "after"}}}}
	got := logsendpoint.StepLogsIndexOf(pod)
	want := []stagecontract.LogRef{{Container: "flaky"}, {Container: "flaky", Previous: true}, {Container: "after"}}
	if got.Pod != "r-defer" || fmt.Sprint(got.Logs) != fmt.Sprint(want) {
		t.Errorf("index = %+v, want %+v", got, want)
	}
}

// A log the kubelet no longer has: for a kubelet-evicted pod the answer
// says why (the kubelet removes its containers as they stop), so the
// manifest's warning does.
func TestLogFetchError(t *testing.T) {
	ref := stagecontract.LogRef{Container: "main"}
	gone := apierrors.NewBadRequest("unable to retrieve container logs for containerd://abc")
	evicted := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Reason: "Evicted"}}
	if err := logsendpoint.LogFetchError(evicted, ref, gone); err == nil || !strings.Contains(err.Error(), "evicted by the kubelet") ||
		!strings.Contains(err.Error(), "unable to retrieve container logs") {
		t.Errorf("evicted pod: %v, want the eviction and the kubelet's answer", err)
	}
	failed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	if err := logsendpoint.LogFetchError(failed, ref, gone); err == nil || strings.Contains(err.Error(), "evicted") ||
		!strings.Contains(err.Error(), "unable to retrieve container logs") {
		t.Errorf("failed pod: %v, want the kubelet's answer alone", err)
	}
}
