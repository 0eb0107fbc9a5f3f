package controller

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// deferPod returns the run's defer pod from the cache, nil if none.
func (r *RunReconciler) deferPod(ctx context.Context, run *v1.DeferRun) *corev1.Pod {
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v1.DeferPodName(run)}, pod); err != nil || !v1.IsDeferPodOf(pod, run) {
		return nil
	}
	return pod
}

// startDeferPod creates the defer pod (its fixed name makes a pass after a
// crash find it instead of creating another), then makes sure the
// namespace's PodDisruptionBudget exists: usually a cache read, a write only
// for the first defer pod of a namespace. The pod goes first because it is
// what the reaction time is measured to; the budget only matters once the
// pod runs (the Eviction API ignores budgets for Pending pods).
func (r *RunReconciler) startDeferPod(ctx context.Context, s *runState, relocate bool) (passEnd, error) {
	run := s.view()
	pod := BuildDeferPod(run, r.opts)
	pvcs := map[string]*corev1.PersistentVolumeClaim{}
	for _, v := range run.Spec.Volumes {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v.ClaimName}, pvc); err == nil && pvc.DeletionTimestamp == nil {
			pvcs[v.ClaimName] = pvc
		}
	}
	if len(pvcs) == 0 && len(run.Spec.Volumes) > 0 {
		missing, err := r.volumesMissing(ctx, run)
		if err != nil {
			return endWrite, err
		}
		if missing {
			// No defer pod could mount them: never created (the PVC's
			// creation failed after the arming webhook made the run), or
			// deleted by someone.
			return endWrite, r.finish(ctx, s, v1.DeferRunSkipped, v1.ReasonVolumeMissing,
				fmt.Sprintf("no work PVC of pod %s exists (%s): there is nothing to stage out", run.Spec.PodName, run.Spec.Volumes[0].ClaimName), nil)
		}
	}
	OwnByVolumes(pod, run, pvcs)
	if relocate {
		pod.Spec.NodeName = "" // the scheduler places it where the volume can attach
	}
	if run.Status.Refusals != nil {
		pod.Spec.ActiveDeadlineSeconds = ptr.To(remainingDeadline(s, r.opts))
	}
	log.FromContext(ctx).Info("creating defer pod", "pod", pod.Name, "node", pod.Spec.NodeName, "trigger", run.Status.Trigger)
	err := r.client.Create(ctx, pod)
	if priorityRefused(err) && run.Spec.Policy.PriorityClassName == "" && pod.Spec.PriorityClassName != "" {
		// The manager's default class is not allowed here (GKE admits
		// critical classes only in namespaces with a ResourceQuota for
		// them): run without it rather than not at all, and say so. The
		// event goes out at once: this pass writes no status after it.
		ev := event{corev1.EventTypeWarning, v1.EventPriorityRefused, fmt.Sprintf(
			"priority class %s refused in namespace %s (%v): the defer pod runs without it, and a node under disk pressure refuses it; create the ResourceQuota of deploy/critical-pods in the namespace (docs/design.md, \"Defer pods under node pressure\")",
			pod.Spec.PriorityClassName, run.Namespace, err), false}
		pod.Spec.PriorityClassName = ""
		if err = r.client.Create(ctx, pod); err == nil {
			r.emit(&runState{run: s.run, events: []event{ev}})
		}
	}
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return endWrite, errRequeue
		}
		if serviceAccountMissing(err) {
			return r.waitForServiceAccount(ctx, s, cmp.Or(pod.Spec.ServiceAccountName, "default"))
		}
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			// Nothing can be created in a namespace being deleted, and its
			// volumes go with it: retrying would hold the namespace forever.
			return endWrite, r.finish(ctx, s, v1.DeferRunSkipped, v1.ReasonNamespaceDeleted,
				fmt.Sprintf("namespace %s is being deleted: no defer pod can run in it", run.Namespace), nil)
		}
		return endWrite, fmt.Errorf("creating defer pod %s: %w", pod.Name, err)
	}
	Metrics.Writes.WithLabelValues("defer-pod").Inc()
	r.created.add(s.now)
	if left := ReservedMounts(&run.Spec.Policy); len(left) > 0 {
		// BuildDeferPod left them out. At once, as for the priority class:
		// this pass writes no status after it.
		r.emit(&runState{run: s.run, events: []event{{corev1.EventTypeWarning, v1.EventReservedMounts, fmt.Sprintf(
			"defer pod %s was created without the mounts of kdefer's volumes its policy's defer containers ask for (a DeferPolicy stored before admission refused them; fix the DeferPolicy): %s",
			pod.Name, strings.Join(left, "; ")), false}}})
	}
	if run.Status.Retries == nil {
		// From the pod's end; a resumed run's pod is not a reaction.
		Metrics.Reaction.Observe(r.clock.Since(s.status.TriggeredAt.Time).Seconds())
	}
	return endCreated, r.ensurePDB(ctx, run)
}

// ensurePDB creates the namespace's defer-pod PodDisruptionBudget (see
// BuildDeferPDB) if the cache does not hold it.
func (r *RunReconciler) ensurePDB(ctx context.Context, run *v1.DeferRun) error {
	pdb := BuildDeferPDB(run)
	err := r.client.Get(ctx, client.ObjectKeyFromObject(pdb), &policyv1.PodDisruptionBudget{})
	if !apierrors.IsNotFound(err) {
		if err != nil {
			return fmt.Errorf("reading PodDisruptionBudget %s: %w", pdb.Name, err)
		}
		return nil
	}
	log.FromContext(ctx).Info("creating the namespace's defer pod disruption budget", "pdb", pdb.Name)
	if err := r.client.Create(ctx, pdb); err != nil {
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil
		}
		return fmt.Errorf("creating PodDisruptionBudget %s: %w", pdb.Name, err)
	}
	Metrics.Writes.WithLabelValues("pdb").Inc()
	return nil
}

// observe reads the defer pod's status into the run and finishes the run
// when the pod says it is over.
func (r *RunReconciler) observe(ctx context.Context, s *runState, pod *corev1.Pod) (passEnd, error) {
	if reason, msg, ok := Refusal(pod); ok {
		return r.refused(ctx, s, pod, reason, msg)
	}
	if !podTerminal(pod) && pod.DeletionTimestamp == nil {
		if err := r.ensurePDB(ctx, s.run); err != nil {
			return endWrite, err
		}
	}
	o := Observe(pod, *s.run.Spec.Policy.RetryLimit)
	if s.status.DeferPodName != pod.Name {
		s.events = append(s.events, event{corev1.EventTypeNormal, v1.EventDeferPodCreated, fmt.Sprintf("defer pod %s created on node %s for trigger %s", pod.Name, pod.Spec.NodeName, s.status.Trigger), true})
	}
	s.status.DeferPodName = pod.Name
	if s.status.StartTime == nil {
		t := pod.CreationTimestamp
		if t.IsZero() {
			t = metav1.Time{Time: s.now}
		}
		s.status.StartTime = &t
	}
	s.status.Steps = o.Steps
	if s.status.Retries != nil {
		s.status.Steps = mergeSteps(s.run.Status.Steps, o.Steps)
	}
	if o.Summary != nil {
		s.status.Bytes, s.status.Objects, s.status.Skipped = o.Summary.Bytes, o.Summary.Objects, o.Summary.Skipped
		s.status.ManifestURL = o.Summary.ManifestURL
		s.status.Unsaved = o.Summary.Unsaved
	}
	reason, problem := stepConfigProblem(s.run, o)
	c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunConfigError)
	stepBlocked := c != nil && c.Status == metav1.ConditionTrue && stepReason(c.Reason)
	switch {
	case o.Failed && o.Reason == v1.ReasonDeadlineExceeded && (problem != "" || stepBlocked):
		// The step never started: say why, not just that time ran out.
		if problem == "" {
			problem = c.Message
		}
		return endWrite, r.finish(ctx, s, v1.DeferRunFailed, v1.ReasonConfigError, problem+" (deadline passed; the work volume is kept per policy)", pod)
	case problem != "" && !o.Done:
		configError(s, reason, problem)
	case stepBlocked:
		configResolved(s)
	}
	if !o.Done {
		if at := bookkeepingAt(pod.CreationTimestamp.Time, s.now, r.created.burst(s.now)); s.run.Status.Trigger == "" && !at.IsZero() {
			// A kubelet status update before the bookkeeping pass, or a
			// burst of defer pod creations going on: nothing worth a
			// write yet.
			s.requeueAt(at)
			return endPostponed, nil
		}
		s.cond(v1.DeferRunStagingOut, true, v1.ReasonStagingOut, fmt.Sprintf("defer pod %s on node %s", pod.Name, pod.Spec.NodeName))
		return endWrite, nil
	}
	if o.Failed {
		return endWrite, r.finish(ctx, s, v1.DeferRunFailed, o.Reason, o.Message, pod)
	}
	msg := "every step succeeded"
	if o.Summary != nil {
		msg = fmt.Sprintf("staged out %d objects (%d bytes, %d already there) to %s", o.Summary.Objects, o.Summary.Bytes, o.Summary.Skipped, o.Summary.ManifestURL)
	}
	if s.status.Unsaved > 0 {
		// Set before finish: handleVolume keeps the volume of an
		// incomplete run, as it keeps a failed one's. (A resumed run's
		// stage-out may have succeeded in an earlier attempt.)
		inc := fmt.Sprintf("%d files could not be staged out (listed with their reasons under \"unsaved\" in %s); the work volume is kept with them: inspect it, then release it with `kdefer release -n %s deferrun/%s`",
			s.status.Unsaved, s.status.ManifestURL, s.run.Namespace, s.run.Name)
		s.cond(v1.DeferRunIncomplete, true, v1.ReasonUnsavedFiles, inc)
		s.events = append(s.events, event{corev1.EventTypeWarning, v1.EventIncomplete, inc, false})
	}
	return endWrite, r.finish(ctx, s, v1.DeferRunSucceeded, v1.ReasonSucceeded, msg, pod)
}

// priorityRefused says whether a pod's creation was refused for its
// priority class: the class does not exist, or a quota's
// limitedResources admit it only in namespaces with a matching
// ResourceQuota ("insufficient quota to match these scopes:
// [{PriorityClass In [...]}]").
func priorityRefused(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PriorityClass")
}

func podTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
