//go:build e2e

package e2e

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// The trigger matrix: one test per way a pod ends. These run in parallel
// (each in its own namespace) after the serial tests that disturb the
// cluster (drain, restarts, kdefer stopped).

var small = workload{files: 3, size: 64 << 10}

// endsAlone runs a Job whose pod ends by itself (mode), and checks the run.
func endsAlone(t *testing.T, name string, w workload, trigger v1.Trigger, mod func(*scenario, *corev1.PodSpec)) {
	s := newScenario(t, name)
	job := s.job("sim", w)
	if mod != nil {
		mod(s, &job.Spec.Template.Spec)
	}
	s.create(job)
	pod := s.waitReady(2 * time.Minute)
	s.armedAtCreation(pod)
	run := s.waitFinished(pod, trigger, v1.DeferRunSucceeded, 3*time.Minute)
	s.checkOutputs("sim", pod, w, trigger)
	s.volumeReleased(run)
	s.noFinalizer(pod)
	s.cleanUp("sim")
}

// TestSucceeded: examples/annotations-only/job.yaml, a Job configured by
// annotations alone, ends by itself with exit 0; its outputs but the
// excluded scratch/ are under the URL's path, every byte as the pod's
// SHA256SUMS says, and the volume is released.
func TestSucceeded(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "succeeded")
	job := &batchv1.Job{}
	s.fromExample("annotations-only/job.yaml", job)
	s.create(job)
	pod := s.waitJobPodRunning(job.Name, 2*time.Minute)
	s.armedAtCreation(pod) // the example runs ~10 s: its PVC is still there
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	s.checkExample("runs/"+s.ns+"/"+job.Name+"/"+pod+"/", v1.TriggerSucceeded, "out/progress.log", "out/result.txt", "out/SHA256SUMS")
	s.volumeReleased(run)
	s.noFinalizer(pod)
	s.cleanUp(job.Name)
}

func TestFailedNonZeroExit(t *testing.T) {
	t.Parallel()
	w := small
	w.mode = "exit 3"
	endsAlone(t, "failed", w, v1.TriggerFailed, nil)
}

func TestOOMKilled(t *testing.T) {
	t.Parallel()
	w := small
	w.mode = "oom"
	endsAlone(t, "oom", w, v1.TriggerOOMKilled, func(s *scenario, spec *corev1.PodSpec) {
		spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: mustQ("24Mi")}
	})
}

// TestEvictedEphemeralStorage: the kubelet evicts the pod for exceeding its
// ephemeral-storage limit (a node-pressure-style eviction, 0 s grace).
func TestEvictedEphemeralStorage(t *testing.T) {
	t.Parallel()
	w := small
	w.mode = "fill"
	endsAlone(t, "evicted", w, v1.TriggerEvicted, func(s *scenario, spec *corev1.PodSpec) {
		spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: mustQ("4Mi")}
	})
}

// TestActiveDeadlineSeconds: the Job's deadline passes while its pod runs
// (outputs written); the Job controller deletes the pod. The deadline is
// shortened once the pod is ready (activeDeadlineSeconds is mutable): a
// fixed one counts from the Job's start, so on a loaded node it could pass
// during the pod's start, before the outputs the test checks exist (CI run
// w1, 2026-12-02, load average 51).
func TestActiveDeadlineSeconds(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "deadline")
	w := small
	w.mode = "hold"
	job := s.job("sim", w)
	job.Spec.ActiveDeadlineSeconds = ptr.To[int64](3600)
	s.create(job)
	pod := s.waitReady(time.Minute)
	if err := s.env.Client.Patch(s.ctx, job, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"activeDeadlineSeconds":1}}`))); err != nil {
		t.Fatal(err)
	}
	run := s.waitFinished(pod, v1.TriggerDeadlineExceeded, v1.DeferRunSucceeded, 3*time.Minute)
	s.checkOutputs("sim", pod, w, v1.TriggerDeadlineExceeded)
	s.volumeReleased(run)
	s.podGone(pod, time.Minute)
	s.cleanUp("sim")
}

func TestPodDeleted(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "deleted")
	w := small
	w.mode = "hold"
	s.create(s.job("sim", w))
	pod := s.waitReady(time.Minute)
	s.recordPVs()
	if err := s.env.Clientset.CoreV1().Pods(s.ns).Delete(s.ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	run := s.waitFinished(pod, v1.TriggerDeleted, v1.DeferRunSucceeded, 3*time.Minute)
	s.checkOutputs("sim", pod, w, v1.TriggerDeleted)
	s.volumeReleased(run)
	s.podGone(pod, time.Minute)
	s.cleanUp("sim")
}

// TestJobDeletedForeground: `kubectl delete job --cascade=foreground` while
// the pod runs; the garbage collector deletes the pod and (once kdefer has
// let go) its work PVC; the outputs are staged out first.
func TestJobDeletedForeground(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "jobdel")
	w := small
	w.mode = "hold"
	s.create(s.job("sim", w))
	pod := s.waitReady(time.Minute)
	s.recordPVs()
	if out, err := kubectl(s.ctx, "delete", "job", "-n", s.ns, "sim", "--cascade=foreground", "--wait=false"); err != nil {
		t.Fatalf("kubectl delete job --cascade=foreground: %v: %s", err, out)
	}
	// kdefer deletes a finished run whose Job is gone: wait for the
	// manifest, then check the run if it is still there.
	s.waitManifest("sim", pod, 3*time.Minute)
	s.runTrigger("sim", pod, v1.TriggerDeleted)
	s.checkOutputs("sim", pod, w, v1.TriggerDeleted)
	s.podGone(pod, time.Minute)
	s.noLeaks(2 * time.Minute)
	if _, err := s.env.Clientset.BatchV1().Jobs(s.ns).Get(s.ctx, "sim", metav1.GetOptions{}); err == nil {
		t.Error("Job sim still exists after its foreground deletion")
	}
}

// TestSkipAnnotation: kdefer.io/skip releases the pod and volume without
// staging anything out.
func TestSkipAnnotation(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "skip")
	w := small
	w.mode = "exit 0"
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationSkip] = "true"
	s.create(job)
	pod := s.waitReady(time.Minute)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSkipped, 2*time.Minute)
	if run.Status.DeferPodName != "" {
		t.Errorf("a skipped run started defer pod %s", run.Status.DeferPodName)
	}
	s.volumeReleased(run)
	s.noFinalizer(pod)
	s.noOutputs("sim", pod)
	s.cleanUp("sim")
}
