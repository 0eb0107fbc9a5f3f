package envtest_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/envtest"
)

// TestEvictionGuard: on a real apiserver with deploy/webhook's
// configuration, the Eviction API answers 429 (the answer kubectl drain
// retries on) for a Pending defer pod, where a PodDisruptionBudget does not
// apply; Running defer pods are left to their budget, finished defer pods
// and other pods are evicted as usual.
func TestEvictionGuard(t *testing.T) {
	env := envtest.Start(t, envtest.WithWebhooks())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	serveWebhooks(t, ctx, env)
	ns := namespace(t, env, "eviction")

	mkPod := func(name string, labels map[string]string) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "stage-out", Image: "kdefer.io/kdefer-stage:test"}}},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	evict := func(p *corev1.Pod) error {
		return env.Client.SubResource("eviction").Create(ctx, p, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
	}
	gone := func(p *corev1.Pod) bool {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
		return apierrors.IsNotFound(err)
	}

	deferPod := mkPod("sim-x7k2p-defer", map[string]string{v1.LabelManaged: v1.ManagedDeferPod, v1.LabelDeferRun: "sim-x7k2p"})
	err := evict(deferPod)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting a Pending defer pod: %v, want 429 Too Many Requests", err)
	}
	wantDenied(t, err, "sim-x7k2p-defer", "DeferRun sim-x7k2p", "kdefer release -n eviction deferrun/sim-x7k2p")
	if gone(deferPod) {
		t.Fatal("the refused eviction deleted the defer pod")
	}

	deferPod.Status.Phase = corev1.PodSucceeded
	if err := env.Client.Status().Update(ctx, deferPod); err != nil {
		t.Fatal(err)
	}
	if err := evict(deferPod); err != nil {
		t.Fatalf("evicting a finished defer pod: %v, want it allowed", err)
	}

	// A Running defer pod is its PodDisruptionBudget's to refuse (none here,
	// and envtest runs no disruption controller): the webhook lets it pass.
	running := mkPod("sim-b3q9z-defer", map[string]string{v1.LabelManaged: v1.ManagedDeferPod, v1.LabelDeferRun: "sim-b3q9z"})
	running.Status.Phase = corev1.PodRunning
	if err := env.Client.Status().Update(ctx, running); err != nil {
		t.Fatal(err)
	}
	if err := evict(running); err != nil {
		t.Fatalf("evicting a Running defer pod without a budget: %v, want it left to the budget", err)
	}

	// Same name shape, not a defer pod: the webhook sees it and lets it go.
	other := mkPod("web-defer", map[string]string{"app": "web"})
	if err := evict(other); err != nil {
		t.Fatalf("evicting an ordinary pod: %v", err)
	}
	if !gone(other) {
		t.Error("the ordinary pod was not evicted")
	}
}
