package controller

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/podstate"
	"github.com/kdefer/kdefer/stagecontract"
)

// trigger classifies the run's pod into s.status. The pod side only arms;
// the run side reacts to the pod's end itself, so a defer pod is one queue
// hop and one write away from it. The trigger is stored with the next status
// write; until then every pass classifies again: the pod is held by kdefer's
// finalizer until the run is final, and once the defer pod exists its
// environment is authoritative (trigger, node), and its creation time is
// when the trigger was seen.
func (r *RunReconciler) trigger(ctx context.Context, s *runState) (bool, error) {
	run := s.run
	pod := &corev1.Pod{}
	var class podstate.Classification
	var job *batchv1.Job
	err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.PodName}, pod)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && pod.UID != run.Spec.PodUID):
		// The pod is gone without a trigger (its finalizer was removed by
		// hand): stage out whatever is on the volume.
		pod, class = nil, podstate.Classification{Done: true, Trigger: v1.TriggerDeleted}
	case err != nil:
		return false, fmt.Errorf("reading pod %s: %w", run.Spec.PodName, err)
	default:
		job = jobOf(ctx, r.client, pod)
		class = podstate.Classify(pod, job)
		if !class.Done {
			lost, wait, err := nodeLost(ctx, r.client, s.now, pod, run)
			if err != nil || !lost {
				if wait > 0 {
					s.requeueAt(s.now.Add(wait))
				}
				return false, err
			}
			log.FromContext(ctx).Info("node lost", "node", pod.Spec.NodeName)
			class = podstate.Classification{Done: true, Trigger: v1.TriggerNodeLost, ExitCodes: podstate.ExitCodes(pod)}
		}
	}
	node, at := "", s.now
	if pod != nil {
		node = pod.Spec.NodeName
	}
	dp := &corev1.Pod{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v1.DeferPodName(run)}, dp); err == nil && v1.IsDeferPodOf(dp, run) {
		for _, e := range dp.Spec.Containers[0].Env {
			switch {
			case e.Name == stagecontract.EnvTrigger && v1.Trigger(e.Value).IsValid():
				class.Trigger = v1.Trigger(e.Value)
			case e.Name == stagecontract.EnvNode:
				node = e.Value
			}
		}
		if t := dp.CreationTimestamp.Time; !t.IsZero() && t.Before(at) {
			at = t
		}
	}
	applyTrigger(s.status, class, node, at)
	switch {
	case class.Skip:
		s.skipReason, s.skipMsg = v1.ReasonForceDeleted, "the pod was deleted with grace period 0 before its containers ended"
	case pod != nil && skipRequested(pod, job):
		s.skipReason, s.skipMsg = v1.ReasonSkipped, fmt.Sprintf("annotation %s on the pod or Job", v1.AnnotationSkip)
	}
	return true, nil
}

// applyTrigger records in st why the run's pod ended, on which node, and
// when that was seen (in memory; the pass's status write stores it).
func applyTrigger(st *v1.DeferRunStatus, class podstate.Classification, node string, at time.Time) {
	st.Trigger = class.Trigger
	st.ExitCodes = class.ExitCodes
	st.NodeName = node
	if st.TriggeredAt == nil {
		st.TriggeredAt = &metav1.Time{Time: at}
	}
}

func skipOf(run *v1.DeferRun) (string, string) {
	if run.Annotations[v1.AnnotationRelease] == "true" {
		return v1.ReasonReleasedByHand, "released by hand before the run finished"
	}
	if run.Annotations[v1.AnnotationSkip] == "true" {
		return v1.ReasonSkipped, fmt.Sprintf("annotation %s on the pod or Job", v1.AnnotationSkip)
	}
	return "", ""
}
