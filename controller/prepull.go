package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

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
// It is owned (not as controller, not blocking) by the run that asked for it,
// so it goes with that run: with its Job or after the run's TTL; the next
// armed pod on the node makes a new one.
func BuildPrePullPod(run *v1.DeferRun, node, image string, pull corev1.PullPolicy) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: PrePullPodName(node, image), Namespace: run.Namespace,
			Labels:          map[string]string{v1.LabelManaged: LabelManagedPrePull},
			OwnerReferences: []metav1.OwnerReference{runOwnerRef(run, false)},
		},
		Spec: corev1.PodSpec{
			NodeName:                     node,
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
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: mustQ("10m"), corev1.ResourceMemory: mustQ("16Mi")}},
				SecurityContext: restricted(nil),
			}},
		},
	}
}

// prePull makes sure the stage image is being pulled on the node of an armed
// pod whose policy asks for it (prePull, default true).
func (r *PodReconciler) prePull(ctx context.Context, s *podState) error {
	run := s.run
	if r.prePullImage == "" || s.class.Done || run.Status.Trigger != "" || s.pod.Spec.NodeName == "" ||
		run.Spec.Policy.StageOut == nil || (run.Spec.Policy.PrePull != nil && !*run.Spec.Policy.PrePull) {
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
