//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// Jobs queued through Kueue (issue #17): Kueue suspends a queued Job at
// creation, admits it by resuming it, and preempts it by suspending it
// again, upon which the Job controller deletes its pods. kdefer's defer
// pods are not the Job's: Kueue neither queues nor counts them (see
// docs/usage.md, "Owners beyond Job").

// Kueue's labels on a Job (sigs.k8s.io/kueue/pkg/controller/constants).
const (
	kueueQueueLabel    = "kueue.x-k8s.io/queue-name"
	kueuePriorityLabel = "kueue.x-k8s.io/priority-class"
)

// jobCPU is what each Job's pod asks; the ClusterQueue's quota holds one
// such pod. The quota is Kueue's bookkeeping, not the node's: 100m leaves
// the node to the parallel scenarios.
const jobCPU = "100m"

// kueueQueue makes a ResourceFlavor, a ClusterQueue with room for one pod
// of jobCPU that preempts lower priorities within itself, and a LocalQueue
// of the scenario's namespace on it; it returns the LocalQueue's name.
func (s *scenario) kueueQueue() string {
	s.t.Helper()
	s.createKueue(fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: %[1]s
`, s.ns))
	s.createKueue(fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: %[1]s
spec:
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: %[1]s
  preemption:
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: %[1]s
      resources:
      - name: cpu
        nominalQuota: %[2]s
`, s.ns, jobCPU))
	s.createKueue(fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: queue
  namespace: %[1]s
spec:
  clusterQueue: %[1]s
`, s.ns))
	return "queue"
}

// holdQueue sets the LocalQueue's stopPolicy: Hold keeps Kueue from
// admitting its Workloads, None lets it admit them.
func (s *scenario) holdQueue(queue, policy string) {
	s.t.Helper()
	lq := &unstructured.Unstructured{}
	lq.SetAPIVersion("kueue.x-k8s.io/v1beta2")
	lq.SetKind("LocalQueue")
	lq.SetNamespace(s.ns)
	lq.SetName(queue)
	patch := []byte(`{"spec":{"stopPolicy":"` + policy + `"}}`)
	if err := s.env.Client.Patch(s.ctx, lq, client.RawPatch(types.MergePatchType, patch)); err != nil {
		s.t.Fatalf("LocalQueue %s stopPolicy %s: %v", queue, policy, err)
	}
	s.logf("LocalQueue %s: stopPolicy %s", queue, policy)
}

// queuedJob is s.job submitted to Kueue's LocalQueue queue, its pod asking
// jobCPU.
func (s *scenario) queuedJob(name string, w workload, queue string) *batchv1.Job {
	job := s.job(name, w)
	job.Labels[kueueQueueLabel] = queue
	cpu := corev1.ResourceList{corev1.ResourceCPU: mustQ(jobCPU)}
	job.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: cpu}
	return job
}

// createQueued creates a queued Job and checks that Kueue's webhook
// suspended it at creation: nothing runs before Kueue admits it.
func (s *scenario) createQueued(job *batchv1.Job) {
	s.t.Helper()
	s.create(job)
	if !ptr.Deref(job.Spec.Suspend, false) {
		s.t.Fatalf("Job %s created unsuspended: Kueue's webhook did not take it", job.Name)
	}
}

// waitWorkload waits until the Kueue Workload of Job job has condition
// cond True, and returns that condition.
func (s *scenario) waitWorkload(job, cond string, timeout time.Duration) map[string]any {
	s.t.Helper()
	var found map[string]any
	err := clusterenv.WaitFor(s.ctx, timeout, fmt.Sprintf("Workload of Job %s/%s %s", s.ns, job, cond), func(ctx context.Context) (bool, error) {
		wls := &unstructured.UnstructuredList{}
		wls.SetAPIVersion("kueue.x-k8s.io/v1beta2")
		wls.SetKind("WorkloadList")
		if err := s.env.Client.List(ctx, wls, client.InNamespace(s.ns)); err != nil {
			return false, err
		}
		for _, wl := range wls.Items {
			owned := false
			for _, o := range wl.GetOwnerReferences() {
				owned = owned || (o.Kind == "Job" && o.Name == job)
			}
			conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
			for _, c := range conds {
				if m := c.(map[string]any); owned && m["type"] == cond && m["status"] == "True" {
					found = m
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.logf("Workload of Job %s: %s (%v: %v)", job, cond, found["reason"], found["message"])
	return found
}

// TestKueueAdmitted: a kdefer Job submitted to a LocalQueue is created
// suspended by Kueue, admitted (resumed), runs and stages out like any
// Job: outputs, manifest and logs in the bucket, volume released, nothing
// left; Kueue sees the Workload finished.
func TestKueueAdmitted(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "kueue-admit")
	s.useKueue()
	queue := s.kueueQueue()
	w := small
	w.mode = "exit 0"
	s.createQueued(s.queuedJob("sim", w, queue))
	s.waitWorkload("sim", "Admitted", 2*time.Minute)
	pod := s.waitReady(3 * time.Minute)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	s.waitWorkload("sim", "Finished", 2*time.Minute)
	s.cleanUp("sim")
}

// TestKueuePreempted: a low-priority kdefer Job fills the ClusterQueue's
// quota and runs; a high-priority Job submitted to the same queue makes
// Kueue preempt the first: Kueue suspends the low Job, the Job controller
// deletes its pod (no DisruptionTarget), and the pod stages out with
// trigger Suspended. The high Job is then admitted, runs and stages out
// too. The low Job has a backoffLimit: the Job controller counts a pod it
// deleted for a suspension as failed, and with 0 the preemption would fail
// the Job instead of requeuing it.
func TestKueuePreempted(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "kueue-preempt")
	s.useKueue()
	queue := s.kueueQueue()
	for name, value := range map[string]int{"low": 100, "high": 1000} {
		s.createKueue(fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: %s-%s
value: %d
`, s.ns, name, value))
	}
	held := small
	held.mode = "hold"
	low := s.queuedJob("low", held, queue)
	low.Labels[kueuePriorityLabel] = s.ns + "-low"
	low.Spec.BackoffLimit = ptr.To[int32](3)
	s.createQueued(low)
	lowPod := s.waitReady(3 * time.Minute)
	s.recordPVs()

	w := small
	w.mode = "exit 0"
	high := s.queuedJob("high", w, queue)
	high.Labels[kueuePriorityLabel] = s.ns + "-high"
	s.createQueued(high)

	evicted := s.waitWorkload("low", "Evicted", 2*time.Minute)
	if evicted["reason"] != "Preempted" {
		t.Errorf("low's Workload evicted with reason %v, want Preempted", evicted["reason"])
	}
	run := s.waitFinished(lowPod, v1.TriggerSuspended, v1.DeferRunSucceeded, 3*time.Minute)
	if run.Spec.JobName != "low" {
		t.Errorf("DeferRun %s: job %q, want low", lowPod, run.Spec.JobName)
	}
	s.checkOutputs("low", lowPod, held, v1.TriggerSuspended)
	s.volumeReleased(run)

	highPod := s.waitReady(3 * time.Minute)
	if !strings.HasPrefix(highPod, "high-") {
		t.Fatalf("pod %s signalled ready, want high's (the low Job is still preempted)", highPod)
	}
	run = s.waitFinished(highPod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	s.checkOutputs("high", highPod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	// Kueue then readmits the low Job, whose new pod holds until deleted.
	s.cleanUp("low", "high")
}
