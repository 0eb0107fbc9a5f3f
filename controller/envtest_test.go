package controller_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	kt "github.com/kdefer/kdefer/controller/testing"
	ct "github.com/kdefer/kdefer/controller/testing/clienttest"
	"github.com/kdefer/kdefer/stagecontract"
)

func TestEnvtest(t *testing.T) {
	t.Parallel() // see newHarness
	h := newHarness(t)
	h.start()
	t.Run("triggers", func(t *testing.T) { h.t = t; testTriggers(h) })
	t.Run("failures", func(t *testing.T) { h.t = t; testFailures(h) })
	t.Run("config error then fixed", func(t *testing.T) { h.t = t; testConfigError(h) })
	t.Run("forced deletion skips", func(t *testing.T) { h.t = t; testForceDelete(h) })
	t.Run("adoption replaces a deleting pod's owner reference", func(t *testing.T) { h.t = t; testAdoptDeleting(h) })
	t.Run("run deleted before it finished stops and releases", func(t *testing.T) { h.t = t; testRunDeleted(h) })
	t.Run("one disruption budget per namespace", func(t *testing.T) { h.t = t; testPDB(h) })
	t.Run("incomplete stage-out keeps the volume", func(t *testing.T) { h.t = t; testIncomplete(h) })
	h.stop()
	t.Run("manager down for the pod's whole life", func(t *testing.T) { h.t = t; testDowntime(h) })
	t.Run("crash points", func(t *testing.T) { h.t = t; testCrashPoints(h) })
}

// Every trigger, end to end to Succeeded: the status shapes are those seen on
// a real v1.34 cluster.
func testTriggers(h *harness) {
	ns := h.namespace("triggers")
	type endFn func(h *harness, pod *corev1.Pod)
	status := func(code int32, reason string, phase corev1.PodPhase, podReason string, conds ...string) endFn {
		return func(h *harness, pod *corev1.Pod) {
			var cs []corev1.PodCondition
			for _, c := range conds {
				cs = append(cs, kt.DisruptionTarget(c))
			}
			h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, code, reason, phase, podReason, cs...) })
		}
	}
	// deleteThen deletes the pod after an optional DisruptionTarget
	// condition; its containers end with SIGTERM's exit code 143.
	deleteThen := func(cond string) endFn {
		return func(h *harness, pod *corev1.Pod) {
			if cond != "" {
				h.updatePodStatus(pod, func(p *corev1.Pod) { p.Status.Conditions = append(p.Status.Conditions, kt.DisruptionTarget(cond)) })
			}
			h.deletePod(pod, 30)
			h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 143, "Error", corev1.PodFailed, "") })
		}
	}
	cases := []struct {
		name string
		end  endFn
		want v1.Trigger
	}{
		{"succeeded", status(0, "Completed", corev1.PodSucceeded, ""), v1.TriggerSucceeded},
		{"failed", status(1, "Error", corev1.PodFailed, ""), v1.TriggerFailed},
		{"oomkilled", status(137, "OOMKilled", corev1.PodFailed, ""), v1.TriggerOOMKilled},
		{"evicted", status(137, "Error", corev1.PodFailed, "Evicted"), v1.TriggerEvicted},
		{"drained", deleteThen("EvictionByEvictionAPI"), v1.TriggerDrained},
		{"preempted", deleteThen("PreemptionByScheduler"), v1.TriggerPreempted},
		{"deadline", status(137, "Error", corev1.PodFailed, "DeadlineExceeded"), v1.TriggerDeadlineExceeded},
		{"deleted", deleteThen(""), v1.TriggerDeleted},
		{"shutdown", status(143, "Error", corev1.PodFailed, "Terminated"), v1.TriggerNodeShutdown},
		{"taint", deleteThen("DeletionByTaintManager"), v1.TriggerTaintEviction},
		{"podgc", status(137, "Error", corev1.PodFailed, "", "DeletionByPodGC"), v1.TriggerPodGC},
	}
	for _, tc := range cases {
		job, pod := h.managedJobPod(ns, tc.name)
		run := h.waitArmed(pod)
		tc.end(h, pod)
		dp := h.waitDeferPod(run)
		if got := env(dp, stagecontract.EnvTrigger); got != string(tc.want) {
			h.t.Errorf("%s: defer pod KDEFER_TRIGGER = %q, want %q", tc.name, got, tc.want)
		}
		if dp.Spec.NodeName != node {
			h.t.Errorf("%s: defer pod on node %q", tc.name, dp.Spec.NodeName)
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: run.Spec.Volumes[0].ClaimName, Namespace: ns}}
		must(h.t, h.get(pvc))
		if refs := dp.OwnerReferences; len(refs) != 1 || refs[0].Kind != "PersistentVolumeClaim" || refs[0].UID != pvc.UID {
			h.t.Errorf("%s: defer pod owners %+v, want the work PVC %s", tc.name, refs, pvc.UID)
		}
		h.finishDeferPod(dp, 0, 0, okSummary)
		h.waitFinished(run, v1.DeferRunSucceeded)
		if run.Status.Trigger != tc.want || run.Status.Bytes != 1234 || run.Status.Objects != 3 || run.Status.ManifestURL != okSummary.ManifestURL {
			h.t.Errorf("%s: run status.trigger=%s status=%+v", tc.name, run.Status.Trigger, run.Status)
		}
		h.waitPodReleased(pod)
		h.eventually(tc.name+": PVC released", func() (bool, error) { return h.pvcGone(pod) })
		h.eventually(tc.name+": job summary", func() (bool, error) {
			err := h.get(job)
			return job.Annotations[v1.AnnotationSummary] == "1/1 staged out", err
		})
		if tc.want == v1.TriggerSucceeded {
			// Runs have no owner; deleting the Job deletes its finished runs.
			must(h.t, h.c.Delete(context.Background(), job))
			h.eventually("the deleted Job's run gone", func() (bool, error) {
				err := h.get(run)
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
		}
	}
}

// A permanent error ends the run at once; the volume is retained (the
// default), the pod is still released; retries exhausted likewise.
func testFailures(h *harness) {
	ns := h.namespace("failures")
	for _, tc := range []struct {
		name     string
		code     int32
		restarts int32
		reason   string
	}{
		{"permanent", stagecontract.ExitPermanent, 0, v1.ReasonPermanentError},
		{"retries", 1, 4, v1.ReasonRetriesExhausted},
	} {
		_, pod := h.managedJobPod(ns, tc.name)
		run := h.waitArmed(pod)
		h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 1, "Error", corev1.PodFailed, "") })
		dp := h.waitDeferPod(run)
		h.finishDeferPod(dp, tc.code, tc.restarts, &stagecontract.StageSummary{Op: "out", ErrorClass: "permanent", Error: "bucket does not exist"})
		h.waitFinished(run, v1.DeferRunFailed)
		if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed); c.Reason != tc.reason {
			h.t.Errorf("%s: Failed reason %s (%s), want %s", tc.name, c.Reason, c.Message, tc.reason)
		}
		if meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunVolumeReleased) {
			h.t.Errorf("%s: volume released; the default onFailure is Retain", tc.name)
		}
		h.waitPodReleased(pod)
		if h.pvcDeleting(pod) {
			h.t.Errorf("%s: PVC deleted; want it retained", tc.name)
		}
		h.eventually("the still running defer pod stopped", func() (bool, error) {
			err := h.get(dp)
			return apierrors.IsNotFound(err) || dp.DeletionTimestamp != nil, client.IgnoreNotFound(err)
		})
	}
}

// A missing DeferPolicy: the run waits with ConfigError naming the policy and
// the fix, keeps the volume, and proceeds once the policy exists.
func testConfigError(h *harness) {
	ns := h.namespace("config")
	_, pod := h.managedJobPod(ns, "cfg", func(p *corev1.Pod) { p.Annotations[v1.AnnotationPolicy] = "later" })
	run := h.waitArmed(pod)
	h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 0, "Completed", corev1.PodSucceeded, "") })
	h.eventually("ConfigError", func() (bool, error) {
		if err := h.get(run); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunConfigError)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "DeferPolicy config/later"), nil
	})
	if h.pvcDeleting(pod) {
		h.t.Fatal("PVC deleted while the run waits for its configuration")
	}
	pol := &v1.DeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: ns},
		Spec: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://other/{pod}/"}, Deadline: &metav1.Duration{Duration: time.Hour}}}
	must(h.t, h.c.Create(context.Background(), pol))
	dp := h.waitDeferPod(run)
	if !strings.Contains(strings.Join(dp.Spec.Containers[0].Args, " "), "s3://bucket/{namespace}/{pod}/") {
		h.t.Errorf("stage-out args %v: the pod's annotation must override the policy's URL", dp.Spec.Containers[0].Args)
	}
	if *dp.Spec.ActiveDeadlineSeconds != 3600 {
		h.t.Errorf("activeDeadlineSeconds = %d, want the policy's 3600", *dp.Spec.ActiveDeadlineSeconds)
	}
	h.finishDeferPod(dp, 0, 0, okSummary)
	h.waitFinished(run, v1.DeferRunSucceeded)
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunConfigError); c.Status != metav1.ConditionFalse {
		h.t.Errorf("ConfigError still %s", c.Status)
	}
}

// kubectl delete --grace-period=0 --force on a running pod: no step runs, the
// volume and the pod are released.
func testForceDelete(h *harness) {
	ns := h.namespace("force")
	_, pod := h.managedJobPod(ns, "force")
	run := h.waitArmed(pod)
	h.deletePod(pod, 0)
	h.waitFinished(run, v1.DeferRunSkipped)
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunSkipped); c.Reason != v1.ReasonForceDeleted {
		h.t.Errorf("Skipped reason %s", c.Reason)
	}
	h.waitPodReleased(pod)
	h.eventually("PVC released", func() (bool, error) { return h.pvcGone(pod) })
	dp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: v1.DeferPodName(run), Namespace: ns}}
	if err := h.get(dp); !apierrors.IsNotFound(err) {
		h.t.Errorf("defer pod exists after a forced deletion: %v", err)
	}
}

// Issue 6: a pod already being deleted when its PVC is adopted loses its
// ownerReference on the PVC, so a pending foreground deletion finishes.
func testAdoptDeleting(h *harness) {
	ns := h.namespace("adopt")
	h.stop()
	defer h.start()
	_, pod := h.managedJobPod(ns, "adopt")
	must(h.t, h.c.Delete(context.Background(), pod, client.PropagationPolicy(metav1.DeletePropagationForeground), client.GracePeriodSeconds(30)))
	h.start()
	run := h.waitArmed(pod)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: pod.Name + "-" + v1.DefaultWorkVolumeName, Namespace: ns}}
	must(h.t, h.get(pvc))
	for _, ref := range pvc.OwnerReferences {
		if ref.Kind == "Pod" {
			h.t.Errorf("PVC still owned by the deleting pod: %+v", pvc.OwnerReferences)
		}
		if ref.UID == run.UID && (*ref.Controller || *ref.BlockOwnerDeletion) {
			h.t.Errorf("run owner ref must be non-controller, non-blocking: %+v", ref)
		}
	}
	h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 143, "Error", corev1.PodFailed, "") })
	dp := h.waitDeferPod(run)
	h.finishDeferPod(dp, 0, 0, okSummary)
	h.waitFinished(run, v1.DeferRunSucceeded)
	h.waitPodReleased(pod)
}

// The manager is down while a pod is created, runs, ends and is deleted;
// started afterwards, it still runs the defer pod and releases everything.
func testDowntime(h *harness) {
	ns := h.namespace("downtime")
	_, pod := h.managedJobPod(ns, "down")
	h.updatePodStatus(pod, func(p *corev1.Pod) {
		kt.Terminate(p, 1, "Error", corev1.PodFailed, "")
		p.Status.ContainerStatuses[0].State.Terminated.FinishedAt = metav1.NewTime(time.Now().Add(-5 * time.Second))
	})
	h.deletePod(pod, 30)
	h.start()
	defer h.stop()
	run := h.waitArmed(pod)
	dp := h.waitDeferPod(run)
	if env(dp, stagecontract.EnvTrigger) != string(v1.TriggerFailed) {
		h.t.Errorf("trigger %q, want Failed (it failed before it was deleted)", env(dp, stagecontract.EnvTrigger))
	}
	h.finishDeferPod(dp, 0, 0, okSummary)
	h.waitFinished(run, v1.DeferRunSucceeded)
	h.waitPodReleased(pod)
	h.eventually("PVC released", func() (bool, error) { return h.pvcGone(pod) })
}

// The manager is stopped right after each write of a stage-out and started
// again: each run ends with exactly one defer pod and one release.
func testCrashPoints(h *harness) {
	ns := h.namespace("crash")
	// Count a clean run's writes first.
	h.writes.Reset()
	h.start()
	clean := crashScenario(h, ns, "clean")
	h.stop()
	n := len(clean)
	h.t.Logf("a stage-out makes %d writes: %v", n, clean)
	if n == 0 {
		h.t.Fatal("no writes counted")
	}
	for i := 1; i <= n; i++ {
		h.writes.Reset()
		h.writes.CrashAfter(i, func() {})
		h.start()
		name := fmt.Sprintf("c%d", i)
		writes := crashScenario(h, ns, name)
		h.stop()
		deferPods := 0
		releases := 0
		for _, w := range writes {
			if w.Verb == "create" && w.Kind == "Pod" && strings.HasSuffix(w.Name, "-defer") {
				deferPods++
			}
			if w.Verb == "delete" && w.Kind == "PersistentVolumeClaim" {
				releases++
			}
		}
		if deferPods != 1 || releases != 1 {
			h.t.Errorf("crash after write %d (%s): %d defer pods created, %d releases; writes: %v", i, clean[i-1], deferPods, releases, writes)
		}
	}
}

// crashScenario runs one pod from creation to release and returns the
// manager's writes for it.
func crashScenario(h *harness, ns, name string) []ct.Write {
	_, pod := h.managedJobPod(ns, name)
	run := h.waitArmed(pod)
	h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 0, "Completed", corev1.PodSucceeded, "") })
	dp := h.waitDeferPod(run)
	// Let the bookkeeping (trigger and StagingOut, one status write) happen
	// before the defer pod ends, as it does for any stage-out longer than
	// the bookkeeping delay, so every write of a stage-out is a crash point.
	h.eventually("StagingOut recorded", func() (bool, error) {
		err := h.get(run)
		return run.Status.State == v1.DeferRunStagingOut, err
	})
	h.finishDeferPod(dp, 0, 0, okSummary)
	h.waitFinished(run, v1.DeferRunSucceeded)
	h.waitPodReleased(pod)
	h.eventually("PVC released", func() (bool, error) { return h.pvcGone(pod) })
	// The summary write on the Job is best effort and may come last.
	h.eventually("job summary", func() (bool, error) {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		err := h.get(job)
		return job.Annotations[v1.AnnotationSummary] != "", err
	})
	var out []ct.Write
	for _, w := range h.writes.Writes() {
		if strings.HasPrefix(w.Name, name) && w.Namespace == ns {
			out = append(out, w)
		}
	}
	return out
}

// The first defer pod of a namespace brings its PodDisruptionBudget, which
// every later defer pod shares; deleted (with the run that owned it) while
// defer pods run, it is created again.
func testPDB(h *harness) {
	ns := h.namespace("pdb")
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: controller.DeferPDBName, Namespace: ns}}
	var runs []*v1.DeferRun
	for _, name := range []string{"first", "second"} {
		_, pod := h.managedJobPod(ns, name)
		run := h.waitArmed(pod)
		h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 0, "Completed", corev1.PodSucceeded, "") })
		h.waitDeferPod(run)
		runs = append(runs, run)
	}
	h.eventually("the namespace's PDB", func() (bool, error) { err := h.get(pdb); return err == nil, err })
	if ma := pdb.Spec.MinAvailable; ma == nil || ma.IntValue() != math.MaxInt32 || len(pdb.OwnerReferences) != 1 || pdb.OwnerReferences[0].Name != runs[0].Name {
		h.t.Errorf("PDB minAvailable %v owners %+v: want MaxInt32, owned by the first run", ma, pdb.OwnerReferences)
	}
	if n := h.writes.Count(func(w ct.Write) bool { return w.Kind == "PodDisruptionBudget" && w.Namespace == ns }); n != 1 {
		h.t.Errorf("%d PDB writes for two defer pods, want 1", n)
	}
	uid := pdb.UID
	must(h.t, h.c.Delete(context.Background(), pdb))
	h.eventually("the PDB created again", func() (bool, error) {
		err := h.get(pdb)
		return err == nil && pdb.UID != uid, client.IgnoreNotFound(err)
	})
}

// A DeferRun deleted before it finished (by a person, or with its
// namespace, which deletes the pod too): the run stops, the volume and the
// pod are released, and the run goes.
func testRunDeleted(h *harness) {
	ns := h.namespace("rundeleted")
	_, pod := h.managedJobPod(ns, "gone")
	run := h.waitArmed(pod)
	h.deletePod(pod, 30)
	must(h.t, h.c.Delete(context.Background(), run))
	h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 143, "Error", corev1.PodFailed, "") })
	h.waitPodReleased(pod)
	h.eventually("PVC released", func() (bool, error) { return h.pvcGone(pod) })
	h.eventually("run gone", func() (bool, error) {
		err := h.get(run)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	dp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: v1.DeferPodName(run), Namespace: ns}}
	if err := h.get(dp); err == nil && dp.DeletionTimestamp == nil {
		h.t.Errorf("a defer pod runs for a deleted run")
	}
}
