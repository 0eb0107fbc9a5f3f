package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// LabelManagedPrePull is the kdefer.io/managed value of pre-pull pods.
const LabelManagedPrePull = "prepull"

// AnnotationSafeToEvict is the cluster autoscaler's annotation: "true" lets
// it scale down a node that runs the pod although nothing it knows would
// recreate the pod.
const AnnotationSafeToEvict = "cluster-autoscaler.kubernetes.io/safe-to-evict"

// prePullMemoryLimit bounds the pre-pull pod's one process, `kdefer-stage
// --version` (a few MiB; the pull itself is the runtime's, charged to no pod).
const prePullMemoryLimit = "64Mi"

// PrePullPodName is the pre-pull pod of an image on a node: one per
// namespace, node and image, so the cost is bounded by those, not by pods.
func PrePullPodName(node, image string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + image))
	return "kdefer-prepull-" + hex.EncodeToString(sum[:])[:16]
}

// BuildPrePullPod returns a pod that pulls the stage image on the node while
// managed pods run there, so a defer run does not wait for the pull. It runs
// `kdefer-stage --version` and completes; kept Succeeded, it tells later
// passes the image is there. Defer containers' own images are not pre-pulled:
// nothing is known about what they can run.
//
// It is controlled (not blocking) by the run that asked for it, so it goes
// with that run: with its Job or after the run's TTL; the next armed pod on
// the node makes a new one. Controlled, because `kubectl drain` refuses,
// without --force, to evict a running pod that "declares no controller"
// (k8s.io/kubectl/pkg/drain's unreplicatedFilter); and annotated safe to
// evict, because the cluster autoscaler keeps a node whose pods' controller
// is of a kind it does not know (skip-nodes-with-custom-controller-pods).
// Evicting it costs nothing but a pull the defer pod does itself. Nothing
// mistakes it for the run's defer pod: those are found by name
// (v1.DeferPodName) and label (v1.ManagedDeferPod), which it does not have.
//
// It requests nothing, explicitly, as defer pods do (see admissible): it
// has a nodeName, so the kubelet's admission is its only resource check,
// and that refused a pre-pull pod requesting 10m of CPU OutOfcpu on a node
// whose CPU requests were full, the image then not pulled (issue #37); a
// zero request is never refused. Zero, not left out: a LimitRange's
// defaults fill in only requests left out (which would make it refusable
// again), and a ResourceQuota on requests.cpu or requests.memory counts an
// explicit zero as specified. The memory limit keeps it off BestEffort,
// which the kubelet refuses under MemoryPressure.
func BuildPrePullPod(run *v1.DeferRun, node, image string, pull corev1.PullPolicy) *corev1.Pod {
	owner := runOwnerRef(run, true)
	owner.BlockOwnerDeletion = ptr.To(false)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: PrePullPodName(node, image), Namespace: run.Namespace,
			Labels:          map[string]string{v1.LabelManaged: LabelManagedPrePull},
			Annotations:     map[string]string{AnnotationSafeToEvict: "true"},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			// The defer pods' pull Secrets. Not their ServiceAccount: a
			// missing one would fail this pod, which only saves a pull.
			ImagePullSecrets:             slices.Clone(run.Spec.Policy.ImagePullSecrets),
			RestartPolicy:                corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:        ptr.To(int64(600)),
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(deferPodUser),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "pull", Image: image, ImagePullPolicy: pullPolicy(pull),
				Args: []string{"--version"}, // the entrypoint is kdefer-stage
				Resources: corev1.ResourceRequirements{
					Requests: zeroRequests(),
					Limits:   corev1.ResourceList{corev1.ResourceMemory: mustQ(prePullMemoryLimit)},
				},
				SecurityContext: restricted(nil),
			}},
		},
	}
}

// prePull makes sure the stage image is being pulled on the node of an armed
// pod whose policy asks for it (prePull, default true), unless the pod or
// its node is on its way out (nodeLeaving, podLeaving): a pre-pull pod there
// would only be one more pod for the drain to evict.
func (r *PodReconciler) prePull(ctx context.Context, s *podState) error {
	run := s.run
	if r.prePullImage == "" || s.class.Done || run.Status.Trigger != "" || s.pod.Spec.NodeName == "" || podLeaving(s.pod) ||
		run.Spec.Policy.StageOut == nil || (run.Spec.Policy.PrePull != nil && !*run.Spec.Policy.PrePull) {
		return nil
	}
	node := &corev1.Node{}
	if err := r.client.Get(ctx, types.NamespacedName{Name: s.pod.Spec.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading node %s: %w", s.pod.Spec.NodeName, err)
	}
	if nodeLeaving(node) {
		return nil
	}
	name := PrePullPodName(s.pod.Spec.NodeName, r.prePullImage)
	err := r.client.Get(ctx, types.NamespacedName{Namespace: s.pod.Namespace, Name: name}, &corev1.Pod{})
	if !apierrors.IsNotFound(err) {
		if err != nil {
			return fmt.Errorf("reading pre-pull pod %s: %w", name, err)
		}
		return nil
	}
	pod := BuildPrePullPod(run, s.pod.Spec.NodeName, r.prePullImage, r.prePullPolicy)
	log.FromContext(ctx).Info("creating pre-pull pod", "pod", pod.Name, "node", pod.Spec.NodeName, "image", r.prePullImage)
	if err := r.client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pre-pull pod %s: %w", pod.Name, err)
	}
	Metrics.Writes.WithLabelValues("prepull").Inc()
	return nil
}

// leavingTaints are the NoSchedule taints drain tools put on a node they are
// about to empty: the node lifecycle controller's mirror of a cordon, the
// cluster autoscaler's before a scale-down, Karpenter's before a disruption.
var leavingTaints = map[string]bool{
	corev1.TaintNodeUnschedulable:    true,
	"ToBeDeletedByClusterAutoscaler": true,
	"karpenter.sh/disrupted":         true,
}

// nodeLeaving says whether node is cordoned or tainted for a drain.
func nodeLeaving(node *corev1.Node) bool {
	if node.Spec.Unschedulable {
		return true
	}
	for _, t := range node.Spec.Taints {
		if leavingTaints[t.Key] {
			return true
		}
	}
	return false
}

// podLeaving says whether pod is being deleted or is marked for a
// disruption (an eviction, preemption or taint-manager deletion on the way).
func podLeaving(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return true
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
