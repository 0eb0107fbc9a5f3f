package clienttest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kt "github.com/kdefer/kdefer/controller/testing"
)

// SetRunning writes the status of a started pod (kt.Running), as the kubelet
// would; envtest runs no kubelet.
func SetRunning(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	kt.Running(pod)
	return c.Status().Update(ctx, pod)
}
