package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// NodeVerdict is what the node of a run allows.
type NodeVerdict struct {
	// Ready: run the defer pod there.
	Ready bool
	// Lost: stop waiting; the run fails with reason NodeLost.
	Lost bool
	// RetryAt: when to look again while waiting.
	RetryAt time.Time
	Message string
}

// JudgeNode decides whether a run may start on its node (nil: the node is
// gone). It waits up to policy.nodeLostTimeout after the trigger for a
// NotReady or missing node to return; the volume of a local PV is bound to
// that node, so the run cannot move.
func JudgeNode(node *corev1.Node, run *v1.DeferRun, triggeredAt, now time.Time) NodeVerdict {
	if node != nil && NodeReady(node) {
		return NodeVerdict{Ready: true}
	}
	timeout := v1.DefaultNodeLostTimeout
	if p := run.Spec.Policy.NodeLostTimeout; p != nil {
		timeout = p.Duration
	}
	what := fmt.Sprintf("node %s is not Ready", run.Status.NodeName)
	if node == nil {
		what = fmt.Sprintf("node %s does not exist", run.Status.NodeName)
	}
	deadline := triggeredAt.Add(timeout)
	if !now.Before(deadline) {
		return NodeVerdict{Lost: true, Message: fmt.Sprintf("%s for %s (policy nodeLostTimeout); the work volume is kept: bring the node back and `kdefer release`, or inspect the PV", what, timeout)}
	}
	retry := now.Add(15 * time.Second)
	if deadline.Before(retry) {
		retry = deadline
	}
	return NodeVerdict{RetryAt: retry, Message: fmt.Sprintf("%s; waiting until %s for it to return", what, deadline.UTC().Format(time.RFC3339))}
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
