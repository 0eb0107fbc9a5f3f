package controller

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// checked is what a check tells execute.
type checked int

const (
	// proceed: nothing in the way; go on to the next step.
	proceed checked = iota
	// relocate: the node is lost but the volume is not node-local: the
	// defer pod goes wherever the scheduler can attach it.
	relocate
	// decided: this pass ends here (waiting, or the run finished); the
	// status is written.
	decided
)

// checkConfig re-resolves a policy that could not be resolved when the run
// was armed. It keeps the volume and waits (within the deadline) while the
// policy is missing. Whether the credentials Secret exists is not checked
// here: kdefer may not read Secrets (least privilege), so the defer pod is
// created and its kubelet tells (stepConfigProblem).
func (r *RunReconciler) checkConfig(ctx context.Context, s *runState) (checked, error) {
	run := s.run
	problem, reason := "", ""
	if msg, ok := run.Annotations[annotationConfigError]; ok {
		_, spec, err := effectivePolicy(ctx, r.client, run.Namespace, run.Spec.PolicyName, run.Annotations)
		var perr *policyProblem
		if err != nil && !errors.As(err, &perr) {
			return decided, err
		}
		if perr == nil {
			// Fixed: take the snapshot now, and go on in the next pass.
			log.FromContext(ctx).Info("resolving the policy that was missing when the run was armed", "was", msg)
			if err := patch(ctx, r.client, run, func(run *v1.DeferRun) {
				run.Spec.Policy = spec
				delete(run.Annotations, annotationConfigError)
			}); err != nil {
				return decided, fmt.Errorf("storing the resolved policy: %w", err)
			}
			r.exp.runs.expect(run)
			return decided, errRequeue
		}
		problem, reason = perr.Error(), perr.reason
	}
	if problem == "" {
		if c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunConfigError); c != nil && c.Status == metav1.ConditionTrue && !stepReason(c.Reason) {
			configResolved(s)
		}
		return proceed, nil
	}
	deadline := attemptStart(s.status).Add(runDeadline(s.view(), r.opts))
	if !s.now.Before(deadline) {
		return decided, r.finish(ctx, s, v1.DeferRunFailed, v1.ReasonConfigError, problem+" (deadline passed; the work volume is kept per policy)", nil)
	}
	configError(s, reason, problem)
	s.requeueAt(s.now.Add(10 * time.Second))
	return decided, nil
}

// configError sets ConfigError True, with an event when the problem is new.
func configError(s *runState, reason, problem string) {
	if c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunConfigError); c == nil || c.Status != metav1.ConditionTrue || c.Message != problem {
		s.events = append(s.events, event{corev1.EventTypeWarning, reason, problem, false})
	}
	s.cond(v1.DeferRunConfigError, true, reason, problem)
}

// configResolved sets a True ConfigError False, with an event.
func configResolved(s *runState) {
	s.cond(v1.DeferRunConfigError, false, v1.ReasonResolved, "configuration resolved")
	s.events = append(s.events, event{corev1.EventTypeNormal, v1.ReasonResolved, "configuration resolved; the run proceeds", false})
}

// stepReason says whether a ConfigError reason is one the defer pod's
// kubelet reported (stepConfigProblem), or its creation
// (waitForServiceAccount), which only the pod can resolve.
func stepReason(reason string) bool {
	return reason == v1.ReasonSecretNotFound || reason == v1.ReasonStepConfig || reason == v1.ReasonServiceAccountNotFound
}

// kubeletSecretNotFound is how the kubelet says a Secret a container needs
// is missing (CreateContainerConfigError).
var kubeletSecretNotFound = regexp.MustCompile(`secret "([^"]+)" not found`)

// stepConfigProblem turns a step the kubelet cannot start for want of a
// Secret or ConfigMap into the run's ConfigError reason and problem, with
// the fix; "" if no step is blocked.
func stepConfigProblem(run *v1.DeferRun, o Outcome) (reason, problem string) {
	if o.Blocked == nil {
		return "", ""
	}
	ns, step := run.Namespace, o.Blocked.Step
	m := kubeletSecretNotFound.FindStringSubmatch(o.Blocked.Message)
	switch {
	case m != nil && run.Spec.Policy.Credentials != nil && m[1] == run.Spec.Policy.Credentials.Name:
		return v1.ReasonSecretNotFound, fmt.Sprintf("Secret %s/%s named as stage-out credentials does not exist: create it (e.g. kubectl create secret generic %s --from-literal=AWS_ACCESS_KEY_ID=... --from-literal=AWS_SECRET_ACCESS_KEY=...); the defer pod waits for it until the run's deadline", ns, m[1], m[1])
	case m != nil:
		return v1.ReasonSecretNotFound, fmt.Sprintf("Secret %s/%s that step %s needs does not exist: create it; the defer pod waits for it until the run's deadline", ns, m[1], step)
	}
	return v1.ReasonStepConfig, fmt.Sprintf("step %s cannot start: %s; fix what it names in namespace %s; the defer pod waits until the run's deadline", step, o.Blocked.Message, ns)
}

// checkNode waits for a NotReady or missing node; once nodeLostTimeout has
// passed, a run whose volumes are not node-local is relocated (the scheduler
// places its defer pod where the volume can attach), any other fails with
// reason NodeLost, keeping the volume.
func (r *RunReconciler) checkNode(ctx context.Context, s *runState, pod *corev1.Pod) (checked, error) {
	if pod != nil && (podTerminal(pod) || pod.Spec.NodeName != s.status.NodeName) {
		return proceed, nil // finished, or already relocated
	}
	if s.status.NodeName == "" {
		// The pod never ran on a node (deleted before it was scheduled, or
		// gone before its node was known): the scheduler places the defer
		// pod, honouring the PV's node affinity.
		if pod == nil {
			return relocate, nil
		}
		return proceed, nil
	}
	var node *corev1.Node
	n := &corev1.Node{}
	err := r.client.Get(ctx, types.NamespacedName{Name: s.status.NodeName}, n)
	switch {
	case err == nil:
		node = n
	case !apierrors.IsNotFound(err):
		return decided, fmt.Errorf("reading node %s: %w", s.status.NodeName, err)
	}
	since := attemptStart(s.status)
	if s.status.Trigger == v1.TriggerNodeLost && s.run.Spec.Policy.NodeLostTimeout != nil && s.status.Retries == nil {
		// The pod side already waited nodeLostTimeout for this node (a
		// resumed run waits afresh).
		since = since.Add(-s.run.Spec.Policy.NodeLostTimeout.Duration)
	}
	v := JudgeNode(node, s.view(), since, s.now)
	switch {
	case v.Ready:
		return proceed, nil
	case v.Lost:
		if pod == nil {
			movable, err := r.volumesMovable(ctx, s.run)
			if err != nil {
				return decided, err
			}
			if movable {
				s.events = append(s.events, event{corev1.EventTypeWarning, v1.EventRelocated, fmt.Sprintf("node %s is lost; the work volume is not node-local, so the defer pod runs elsewhere", s.status.NodeName), false})
				return relocate, nil
			}
		}
		return decided, r.finish(ctx, s, v1.DeferRunFailed, v1.ReasonNodeLost, v.Message, pod)
	}
	if c := meta.FindStatusCondition(s.status.Conditions, v1.DeferRunStagingOut); c == nil || c.Reason != v1.ReasonNodeNotReady {
		s.events = append(s.events, event{corev1.EventTypeWarning, v1.ReasonNodeNotReady, v.Message, false})
	}
	s.cond(v1.DeferRunStagingOut, false, v1.ReasonNodeNotReady, v.Message)
	s.requeueAt(v.RetryAt)
	return decided, nil
}

// volumesMissing reports whether no work PVC of run exists that a pod could
// mount (absent, or being deleted), asking the API server: the cache may be
// behind a PVC created a moment ago.
func (r *RunReconciler) volumesMissing(ctx context.Context, run *v1.DeferRun) (bool, error) {
	for _, v := range run.Spec.Volumes {
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v.ClaimName}, pvc)
		if client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("reading work PVC %s: %w", v.ClaimName, err)
		}
		if err == nil && pvc.DeletionTimestamp == nil {
			return false, nil
		}
	}
	return true, nil
}

// volumesMovable reports whether every work volume is bound to a PV that is
// not pinned to one node (no kubernetes.io/hostname in its node affinity),
// so a defer pod elsewhere can mount it. Uncached reads: a rare path.
func (r *RunReconciler) volumesMovable(ctx context.Context, run *v1.DeferRun) (bool, error) {
	for _, v := range run.Spec.Volumes {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v.ClaimName}, pvc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if pvc.Spec.VolumeName == "" {
			return false, nil
		}
		pv := &corev1.PersistentVolume{}
		if err := r.apiReader.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if NodeLocal(pv) {
			return false, nil
		}
	}
	return len(run.Spec.Volumes) > 0, nil
}

// NodeLocal reports whether a PV can only be used on one node: its node
// affinity pins a node, or it is a local or hostPath volume without one (the
// disk of whichever node it is on). A local volume whose affinity selects
// nodes by anything else is a file system that every node it selects mounts
// at the same path (a cluster file system such as Lustre or GPFS; the e2e
// cluster's kdefer-shared class): the scheduler can place a relocated defer
// pod on any of them.
func NodeLocal(pv *corev1.PersistentVolume) bool {
	a := pv.Spec.NodeAffinity
	if a == nil || a.Required == nil || len(a.Required.NodeSelectorTerms) == 0 {
		return pv.Spec.Local != nil || pv.Spec.HostPath != nil
	}
	for _, term := range a.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == corev1.LabelHostname {
				return true
			}
		}
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" {
				return true
			}
		}
	}
	return false
}
