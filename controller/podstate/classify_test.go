package podstate

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	rt "github.com/kdefer/kdefer/render/testing"
)

func TestClassify(t *testing.T) {
	pod := func() *kt.PodWrapper { return kt.MakePod("p", "ns").OnNode("n1") }
	exit := func(code int32, reason string) []v1.ContainerExit {
		return []v1.ContainerExit{{Name: "main", ExitCode: code, Reason: reason}}
	}
	cases := map[string]struct {
		pod  *corev1.Pod
		job  *batchv1.Job
		want Classification
	}{
		"running": {pod: pod().Obj(), want: Classification{}},
		"succeeded": {pod: pod().Succeeded().Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerSucceeded, ExitCodes: exit(0, "Completed")}},
		"failed": {pod: pod().Failed().Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerFailed, ExitCodes: exit(1, "Error")}},
		// facts 7: main process OOM-killed on cgroup v1: exit 137, Failed, empty reason.
		"oom killed": {pod: pod().OOMKilled().Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerOOMKilled, ExitCodes: exit(137, "OOMKilled")}},
		// facts 7: only a child killed, the shell exits 0: reason OOMKilled, pod Succeeded.
		"oom killed child, exit 0, pod succeeded": {pod: pod().AllTerminated(0, "OOMKilled").Phase(corev1.PodSucceeded).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerOOMKilled, ExitCodes: exit(0, "OOMKilled")}},
		// e2e, 1 run in 6: containerd missed the OOM event, the kubelet reported a plain SIGKILL.
		"oom killed, runtime missed the event": {pod: pod().MemoryLimit("24Mi").AllTerminated(137, "Error").Phase(corev1.PodFailed).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerOOMKilled, ExitCodes: exit(137, "Error")}},
		"sigkill without a memory limit": {pod: pod().AllTerminated(137, "Error").Phase(corev1.PodFailed).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerFailed, ExitCodes: exit(137, "Error")}},
		"memory limit, plain failure": {pod: pod().MemoryLimit("24Mi").Failed().Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerFailed, ExitCodes: exit(1, "Error")}},
		"memory limit, SIGKILL at the end of a deletion's grace": {pod: pod().MemoryLimit("24Mi").Deleting(30*time.Second, 30).AllTerminated(137, "Error").Phase(corev1.PodFailed).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeleted, ExitCodes: exit(137, "Error")}},
		"memory limit, kubelet eviction": {pod: pod().MemoryLimit("24Mi").Evicted().Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerEvicted, ExitCodes: exit(137, "Error")}},
		// facts 6: ephemeral-storage eviction: reason Evicted, no DisruptionTarget.
		"kubelet eviction": {pod: pod().Evicted().Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerEvicted, ExitCodes: exit(137, "Error")}},
		"kubelet eviction, ContainerStatusUnknown": {pod: pod().AllTerminated(137, "ContainerStatusUnknown").Phase(corev1.PodFailed).Reason("Evicted", "").Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerEvicted, ExitCodes: exit(137, "ContainerStatusUnknown")}},
		// facts "Eviction as observed", step 1: still running with DisruptionTarget.
		"drain, still running": {pod: pod().DisruptionTarget("EvictionByEvictionAPI", "").Deleting(30*time.Second, 30).Obj(),
			want: Classification{}},
		// step 3: the Job controller counted it failed, phase still Running, container exited.
		"drain, containers exited, phase still running": {pod: pod().DisruptionTarget("EvictionByEvictionAPI", "").Deleting(30*time.Second, 30).AllTerminated(143, "Error").Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDrained, ExitCodes: exit(143, "Error")}},
		"drain, failed": {pod: pod().Drained().Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDrained, ExitCodes: exit(143, "Error")}},
		"preempted": {pod: pod().DisruptionTarget("PreemptionByScheduler", "").Deleting(30*time.Second, 30).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerPreempted, ExitCodes: exit(143, "Error")}},
		"taint manager": {pod: pod().DisruptionTarget("DeletionByTaintManager", "").Deleting(30*time.Second, 30).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerTaintEviction, ExitCodes: exit(143, "Error")}},
		"pod gc": {pod: pod().DisruptionTarget("DeletionByPodGC", "").AllTerminated(137, "Error").Phase(corev1.PodFailed).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerPodGC, ExitCodes: exit(137, "Error")}},
		"node-pressure, TerminationByKubelet": {pod: pod().DisruptionTarget("TerminationByKubelet", "The node was low on resource: memory.").AllTerminated(137, "Error").Phase(corev1.PodFailed).Reason("Evicted", "The node was low on resource: memory.").Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerEvicted, ExitCodes: exit(137, "Error")}},
		"graceful node shutdown": {pod: pod().DisruptionTarget("TerminationByKubelet", "Pod was terminated in response to imminent node shutdown.").AllTerminated(143, "Error").Phase(corev1.PodFailed).Reason("Terminated", "Pod was terminated in response to imminent node shutdown.").Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerNodeShutdown, ExitCodes: exit(143, "Error")}},
		"node shutdown, reason only": {pod: pod().AllTerminated(143, "Error").Phase(corev1.PodFailed).Reason("Shutdown", "").Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerNodeShutdown, ExitCodes: exit(143, "Error")}},
		"pod activeDeadlineSeconds": {pod: pod().AllTerminated(137, "Error").Phase(corev1.PodFailed).Reason("DeadlineExceeded", "Pod was active on the node longer than the specified deadline").Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeadlineExceeded, ExitCodes: exit(137, "Error")}},
		"job deadline: the Job controller deletes the pod": {pod: pod().Deleting(30*time.Second, 30).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			job:  rt.MakeJob("j", "ns").UID("uid-j").DeadlineExceeded().Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeadlineExceeded, ExitCodes: exit(143, "Error")}},
		// Kueue preempts (or evicts) a workload by suspending its Job; the
		// Job controller then deletes the Job's running pods, with no
		// DisruptionTarget condition.
		"job suspended: the Job controller deletes the pod": {pod: pod().Deleting(30*time.Second, 30).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			job:  rt.MakeJob("j", "ns").UID("uid-j").Suspend(true).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerSuspended, ExitCodes: exit(143, "Error")}},
		"job suspended, status written, spec not yet read back": {pod: pod().Deleting(30*time.Second, 30).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			job:  rt.MakeJob("j", "ns").UID("uid-j").SuspendedCondition(corev1.ConditionTrue, kt.T0.Add(30*time.Second)).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerSuspended, ExitCodes: exit(143, "Error")}},
		// Readmitted (resumed) while the pod's grace period ran: the
		// deletion still came from the suspension.
		"job resumed after the pod's deletion was requested": {pod: pod().Deleting(30*time.Second, 30).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			job:  rt.MakeJob("j", "ns").UID("uid-j").Suspend(false).SuspendedCondition(corev1.ConditionFalse, kt.T0.Add(45*time.Second)).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerSuspended, ExitCodes: exit(143, "Error")}},
		"job suspended, the kubelet's final delete overwrote the deletion time": {pod: pod().Deleting(61*time.Second, 0).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			job:  rt.MakeJob("j", "ns").UID("uid-j").Suspend(true).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerSuspended, ExitCodes: exit(143, "Error")}},
		"job resumed before the pod was deleted by a user": {pod: pod().Deleting(30*time.Second, 30).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			job:  rt.MakeJob("j", "ns").UID("uid-j").Suspend(false).SuspendedCondition(corev1.ConditionFalse, kt.T0.Add(-10*time.Minute)).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeleted, ExitCodes: exit(143, "Error")}},
		"job suspended after the pod failed by itself": {pod: pod().Failed().Deleting(10*time.Minute, 30).Obj(),
			job:  rt.MakeJob("j", "ns").UID("uid-j").Suspend(true).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerFailed, ExitCodes: exit(1, "Error")}},
		"deleted": {pod: pod().Deleting(30*time.Second, 30).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeleted, ExitCodes: exit(143, "Error")}},
		"deleted, containers exited, phase not yet terminal": {pod: pod().Deleting(30*time.Second, 30).AllTerminated(143, "Error").Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeleted, ExitCodes: exit(143, "Error")}},
		"deleted while terminating, containers still running": {pod: pod().Deleting(30*time.Second, 30).Obj(),
			want: Classification{}},
		"failed by itself, deleted later": {pod: pod().Failed().Deleting(10*time.Minute, 30).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerFailed, ExitCodes: exit(1, "Error")}},
		"succeeded, deleted later": {pod: pod().Succeeded().Deleting(10*time.Minute, 30).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerSucceeded, ExitCodes: exit(0, "Completed")}},
		"forced deletion while running": {pod: pod().Deleting(30*time.Second, 0).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeleted, Skip: true}},
		// The kubelet's own final delete (grace 0) after the containers ended is not a forced deletion.
		"kubelet final delete after a graceful one": {pod: pod().Deleting(30*time.Second, 0).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeleted, ExitCodes: exit(143, "Error")}},
		// Job deleted while kdefer was down: by the time kdefer looks, the
		// kubelet's final delete has replaced the deletion time (observed:
		// exit 143 at T, deletionTimestamp T+1s, grace 0).
		"kubelet final delete overwrote the deletion time": {pod: pod().Deleting(61*time.Second, 0).AllTerminated(143, "Error").Phase(corev1.PodFailed).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeleted, ExitCodes: exit(143, "Error")}},
		"failed by itself, kubelet final delete later": {pod: pod().Failed().Deleting(10*time.Minute, 0).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerFailed, ExitCodes: exit(1, "Error")}},
		"deleted before scheduling": {pod: kt.MakePod("p", "ns").Phase(corev1.PodPending).Deleting(0, 30).Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeleted, Skip: true}},
		"native sidecar still running does not count": {pod: pod().Sidecar("proxy").Deleting(30*time.Second, 30).AllTerminated(143, "Error").Obj(),
			want: Classification{Done: true, Trigger: v1.TriggerDeleted, ExitCodes: exit(143, "Error")}},
		"one of two main containers still running": {pod: pod().Container("second").Terminated("main", 0, "Completed", time.Minute).Deleting(30*time.Second, 30).Obj(),
			want: Classification{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Classify(tc.pod, tc.job)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Classify (-want +got):\n%s", diff)
			}
			// The cache keeps stripped pods: they must classify the same.
			stripped, _ := StripPod(tc.pod.DeepCopy())
			if diff := cmp.Diff(got, Classify(stripped.(*corev1.Pod), tc.job)); diff != "" {
				t.Errorf("Classify of the cached (stripped) pod differs (-full +stripped):\n%s", diff)
			}
			if diff := cmp.Diff(WorkClaims(tc.pod), WorkClaims(stripped.(*corev1.Pod))); diff != "" {
				t.Errorf("WorkClaims of the stripped pod differ:\n%s", diff)
			}
		})
	}
}
