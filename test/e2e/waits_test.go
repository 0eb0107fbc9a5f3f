//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

func (s *scenario) run(pod string) *v1.DeferRun {
	run := &v1.DeferRun{}
	if err := s.env.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, run); err != nil {
		return nil
	}
	return run
}

// waitRun waits until the pod's DeferRun satisfies cond.
func (s *scenario) waitRun(pod string, timeout time.Duration, what string, cond func(*v1.DeferRun) bool) *v1.DeferRun {
	s.t.Helper()
	var last *v1.DeferRun
	err := clusterenv.WaitFor(s.ctx, timeout, "DeferRun "+s.ns+"/"+pod+" "+what, func(ctx context.Context) (bool, error) {
		run := &v1.DeferRun{}
		if err := s.env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, run); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		last = run
		return cond(run), nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w (last: trigger %q state %q conditions %s steps %s)", err, last.Status.Trigger, last.Status.State, runConds(last), steps(last))
		}
		s.t.Fatal(err)
	}
	return last
}

func steps(r *v1.DeferRun) string {
	var b []string
	for _, st := range r.Status.Steps {
		code := "-"
		if st.ExitCode != nil {
			code = fmt.Sprint(*st.ExitCode)
		}
		b = append(b, fmt.Sprintf("%s: %d attempts, exit %s, %q", st.Name, st.Attempts, code, st.Message))
	}
	return "[" + strings.Join(b, "; ") + "]"
}

func runConds(r *v1.DeferRun) string {
	var b []string
	for _, c := range r.Status.Conditions {
		b = append(b, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return strings.Join(b, ",")
}

func finished(r *v1.DeferRun) bool {
	switch r.Status.State {
	case v1.DeferRunSucceeded, v1.DeferRunFailed, v1.DeferRunSkipped:
		return true
	}
	return false
}

// waitFinished waits for the run's end and checks its trigger and state.
func (s *scenario) waitFinished(pod string, trigger v1.Trigger, state string, timeout time.Duration) *v1.DeferRun {
	s.t.Helper()
	run := s.waitRun(pod, timeout, "to finish", finished)
	s.logf("DeferRun %s: trigger %s state %s (%s)", pod, run.Status.Trigger, run.Status.State, runConds(run))
	if run.Status.Trigger != trigger {
		s.t.Errorf("DeferRun %s: trigger %q, want %q", pod, run.Status.Trigger, trigger)
	}
	if run.Status.State != state {
		s.t.Errorf("DeferRun %s: state %q, want %q (conditions %s, steps %s)", pod, run.Status.State, state, runConds(run), steps(run))
	}
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunTriggered)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(trigger) {
		s.t.Errorf("DeferRun %s: Triggered condition %+v, want True/%s", pod, c, trigger)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, state); c == nil || c.Status != metav1.ConditionTrue {
		s.t.Errorf("DeferRun %s: condition %s %+v, want True", pod, state, c)
	}
	return run
}

// diskFreedWithin bounds how long after the release the defer pod and the
// work PVC may take to go: docs/design.md promises the disk is freed "as soon
// as its stage-out succeeded". The release deletes the PVC in the foreground;
// the garbage collector deletes the defer pod (a blocking dependent) within
// milliseconds, the kubelet sees that through its watch and confirms a
// terminated pod's deletion within seconds, and pvc-protection then lets the
// PVC go. 30 s leaves
// room for a kubelet that was just restarted (Ready again in ~10 s) and for
// a loaded 2-core machine; a pod still there after it is held by something
// (as the non-blocking owner reference once held it, until the Job went).
const diskFreedWithin = 30 * time.Second

// volumeReleased checks that the run released its work volume and that its
// disk is freed at once: the defer pod goes with it, and the PVC is gone
// unless the Job's own pod still exists (a generic ephemeral volume lives as
// long as its pod; the PVC then stays Terminating until the pod is deleted).
func (s *scenario) volumeReleased(run *v1.DeferRun) {
	s.t.Helper()
	run = s.waitRun(run.Name, time.Minute, "to release its volume", func(r *v1.DeferRun) bool {
		return meta.IsStatusConditionTrue(r.Status.Conditions, v1.DeferRunVolumeReleased)
	})
	if dp := run.Status.DeferPodName; dp != "" {
		if err := s.env.WaitPodGone(s.ctx, s.ns, dp, diskFreedWithin); err != nil {
			s.t.Errorf("defer pod of a released volume: %v", err)
		} else if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased); c != nil {
			// The evidence for issue #18's late defer pods: how long each
			// one outlived its release (the condition's time has 1 s steps).
			s.logf("defer pod %s gone %s after the volume was released", dp, time.Since(c.LastTransitionTime.Time).Round(100*time.Millisecond))
		}
	}
	for _, v := range run.Spec.Volumes {
		var state string
		err := clusterenv.WaitFor(s.ctx, diskFreedWithin, "work PVC "+v.ClaimName+" deleted", func(ctx context.Context) (bool, error) {
			pvc, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).Get(ctx, v.ClaimName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			if err != nil || pvc.DeletionTimestamp == nil {
				state = "not deleted"
				return false, err
			}
			pod, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(ctx, run.Spec.PodName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && pod.DeletionTimestamp != nil) {
				state = "Terminating, though its pod is gone"
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			s.t.Errorf("%v (%s)", err, state)
		}
	}
}

// recordPVs remembers which PV each work PVC of the namespace is bound to.
func (s *scenario) recordPVs() {
	pvcs, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	s.pvMu.Lock()
	defer s.pvMu.Unlock()
	for _, p := range pvcs.Items {
		if p.Spec.VolumeName != "" {
			s.pvs[p.Name] = p.Spec.VolumeName
		}
	}
}

// podGone waits until the pod has been deleted (its finalizer removed).
func (s *scenario) podGone(pod string, timeout time.Duration) { //nolint:unparam // each scenario states how long it allows
	s.t.Helper()
	if err := s.env.WaitPodGone(s.ctx, s.ns, pod, timeout); err != nil {
		s.t.Fatal(err)
	}
}

// noFinalizer waits until kdefer's finalizer is off the pod (or the pod is gone).
func (s *scenario) noFinalizer(pod string) {
	s.t.Helper()
	err := clusterenv.WaitFor(s.ctx, time.Minute, "kdefer's finalizer off pod "+pod, func(ctx context.Context) (bool, error) {
		p, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		for _, f := range p.Finalizers {
			if f == v1.PodFinalizer {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// cleanUp deletes the Job (if still there) with background propagation and
// checks nothing of the scenario is left: no pod, PVC, DeferRun or PDB in
// the namespace, and no PV still bound to one of its claims.
func (s *scenario) cleanUp(jobs ...string) {
	s.t.Helper()
	s.recordPVs()
	for _, j := range jobs {
		err := s.env.Clientset.BatchV1().Jobs(s.ns).Delete(s.ctx, j, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			s.t.Fatalf("delete job %s: %v", j, err)
		}
	}
	s.noLeaks(2 * time.Minute)
}

func (s *scenario) noLeaks(timeout time.Duration) {
	s.t.Helper()
	var left string
	err := clusterenv.WaitFor(s.ctx, timeout, "every pod, PVC, PDB and DeferRun of "+s.ns+" to be gone", func(ctx context.Context) (bool, error) {
		var names []string
		pods, err := s.env.Clientset.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			names = append(names, "pod/"+p.Name)
		}
		pvcs, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pvcs.Items {
			names = append(names, "pvc/"+p.Name)
		}
		pdbs, err := s.env.Clientset.PolicyV1().PodDisruptionBudgets(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pdbs.Items {
			names = append(names, "pdb/"+p.Name)
		}
		runs := &v1.DeferRunList{}
		if err := s.env.Client.List(ctx, runs, client.InNamespace(s.ns)); err != nil {
			return false, err
		}
		for _, r := range runs.Items {
			names = append(names, "deferrun/"+r.Name)
		}
		left = strings.Join(names, " ")
		return len(names) == 0, nil
	})
	if err != nil {
		s.t.Fatalf("%v; left: %s", err, left)
	}
	s.waitPVsUnbound(time.Minute)
	recyclePVs(s.t, s.env)
}

// waitPVsUnbound waits until no PV recorded for the scenario is bound to its
// claim, and reports each that stays bound. The PV controller marks a PV
// Released a moment after its claim is gone; it may then be Available
// again already, or bound to another claim: every scenario's cleanUp wipes
// every Released PV of the cluster (recyclePVs), and one running beside
// this one may have been first (w37: TestDiskPressure waited a minute for
// "Released" while its PV had been wiped).
func (s *scenario) waitPVsUnbound(timeout time.Duration) bool {
	s.t.Helper()
	s.pvMu.Lock()
	pvs := maps.Clone(s.pvs)
	s.pvMu.Unlock()
	ok := true
	for claim, pv := range pvs {
		err := clusterenv.WaitFor(s.ctx, timeout, "PV "+pv+" no longer Bound to "+s.ns+"/"+claim, func(ctx context.Context) (bool, error) {
			p, err := s.env.Clientset.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			bound := p.Status.Phase == corev1.VolumeBound && p.Spec.ClaimRef != nil && p.Spec.ClaimRef.Namespace == s.ns && p.Spec.ClaimRef.Name == claim
			return !bound, nil
		})
		if err != nil {
			s.t.Error(err)
			ok = false
		}
	}
	return ok
}

var recycleMu sync.Mutex

func recyclePVs(t *testing.T, env *clusterenv.Env) {
	recycleMu.Lock()
	defer recycleMu.Unlock()
	if _, err := env.RecycleReleasedPVs(context.Background()); err != nil {
		t.Logf("recycle PVs: %v", err) // a concurrent recycle; the next one gets it
	}
}

// notTheJobs checks that the defer pod looks like none of Job job's pods to
// anything that selects them: the Job controller and kubectl select by the
// job-name and controller-uid labels, users' tools by the template's own
// labels, the garbage collector and Kueue follow owner references. A defer
// pod counted as the Job's would be taken for a failed or extra pod of the
// Job: the Job's counts must be its own pods'.
func (s *scenario) notTheJobs(job, deferPod string) {
	s.t.Helper()
	j, err := s.env.Clientset.BatchV1().Jobs(s.ns).Get(s.ctx, job, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	sels := []string{
		"batch.kubernetes.io/job-name=" + job, "job-name=" + job,
		"batch.kubernetes.io/controller-uid=" + string(j.UID), "controller-uid=" + string(j.UID),
		metav1.FormatLabelSelector(j.Spec.Selector),
	}
	for k, v := range j.Spec.Template.Labels {
		sels = append(sels, k+"="+v)
	}
	own, err := s.env.Clientset.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		s.t.Fatal(err)
	}
	if n := j.Status.Active + j.Status.Succeeded + j.Status.Failed; int(n) > len(own.Items) || (j.Status.Ready != nil && *j.Status.Ready > j.Status.Active) {
		s.t.Errorf("Job %s counts %d active (%v ready), %d succeeded, %d failed, more than its %d pods", job, j.Status.Active, ptr.Deref(j.Status.Ready, 0), j.Status.Succeeded, j.Status.Failed, len(own.Items))
	}
	for _, sel := range sels {
		pods, err := s.env.Clientset.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			s.t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			s.t.Errorf("selector %s selects no pod: the check would see nothing", sel)
		}
		for _, p := range pods.Items {
			if p.Name == deferPod {
				s.t.Errorf("defer pod %s is selected by the Job's selector %s", deferPod, sel)
			}
		}
	}
	p, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(s.ctx, deferPod, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, o := range p.OwnerReferences {
		if o.UID == j.UID || o.Kind == "Job" {
			s.t.Errorf("defer pod %s is owned by %s %s", deferPod, o.Kind, o.Name)
		}
	}
	s.logf("defer pod %s: none of Job %s's labels or owners", deferPod, job)
}
