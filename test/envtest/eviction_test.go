package envtest_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/test/envtest"
)

// TestEvictionGuard: on a real apiserver with deploy/webhook's
// configuration, the Eviction API answers 429 (the answer kubectl drain
// retries on) for a Pending defer pod, where a PodDisruptionBudget does not
// apply; Running defer pods are left to their budget, finished defer pods
// and other pods are evicted as usual. A defer pod is known by kdefer's
// owner references (to its unfinished DeferRun, or to a work PVC the run
// co-owns), never by labels or a name a user can give any pod.
func TestEvictionGuard(t *testing.T) {
	env := envtest.Start(t, envtest.WithWebhooks())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	serveWebhooks(t, ctx, env)
	ns := namespace(t, env, "eviction")

	mkRun := func(name string) *v1.DeferRun {
		t.Helper()
		run := kt.MakeRun(name, ns).Obj()
		run.UID, run.Finalizers, run.Status = "", nil, v1.DeferRunStatus{}
		if err := env.Client.Create(ctx, run); err != nil {
			t.Fatal(err)
		}
		return run
	}
	runRef := func(run *v1.DeferRun) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: v1.GroupVersion.String(), Kind: "DeferRun", Name: run.Name, UID: run.UID, Controller: ptr(true)}
	}
	labels := func(run string) map[string]string {
		return map[string]string{v1.LabelManaged: v1.ManagedDeferPod, v1.LabelDeferRun: run}
	}
	mkPod := func(name string, labels map[string]string, owners ...metav1.OwnerReference) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, OwnerReferences: owners},
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
	setPhase := func(p *corev1.Pod, phase corev1.PodPhase) {
		t.Helper()
		p.Status.Phase = phase
		if err := env.Client.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	run := mkRun("sim-x7k2p")
	deferPod := mkPod(v1.DeferPodName(run), labels(run.Name), runRef(run))
	err := evict(deferPod)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting a Pending defer pod: %v, want 429 Too Many Requests", err)
	}
	wantDenied(t, err, "sim-x7k2p-defer", "DeferRun sim-x7k2p", "kdefer release -n eviction deferrun/sim-x7k2p")
	if gone(deferPod) {
		t.Fatal("the refused eviction deleted the defer pod")
	}
	setPhase(deferPod, corev1.PodSucceeded)
	if err := evict(deferPod); err != nil {
		t.Fatalf("evicting a finished defer pod: %v, want it allowed", err)
	}

	// Owned by its work PVC, as OwnByVolumes makes every defer pod whose
	// volumes are known: the PVC is co-owned by the run.
	byVolume := mkRun("sim-v0l")
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: byVolume.Spec.Volumes[0].ClaimName, Namespace: ns, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: v1.GroupVersion.String(), Kind: "DeferRun", Name: byVolume.Name, UID: byVolume.UID, Controller: ptr(false)}}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	if err := env.Client.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	volumePod := mkPod(v1.DeferPodName(byVolume), labels(byVolume.Name),
		metav1.OwnerReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: pvc.Name, UID: pvc.UID, Controller: ptr(true)})
	if err := evict(volumePod); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting a Pending defer pod owned by its work PVC: %v, want 429 Too Many Requests", err)
	}
	// Once its run is finished, nothing holds it.
	byVolume.Status.Conditions = []metav1.Condition{{Type: v1.DeferRunSucceeded, Status: metav1.ConditionTrue, Reason: v1.ReasonSucceeded, LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx, byVolume); err != nil {
		t.Fatal(err)
	}
	if err := evict(volumePod); err != nil {
		t.Errorf("evicting the defer pod of a finished run: %v, want it allowed", err)
	}

	// A Running defer pod is its PodDisruptionBudget's to refuse (none here,
	// and envtest runs no disruption controller): the webhook lets it pass.
	running := mkPod("sim-b3q9z-defer", labels("sim-b3q9z"), runRef(mkRun("sim-b3q9z")))
	setPhase(running, corev1.PodRunning)
	if err := evict(running); err != nil {
		t.Fatalf("evicting a Running defer pod without a budget: %v, want it left to the budget", err)
	}

	// A user's Pending pod with a defer pod's labels and name shape is not
	// protected (it would hold a drain for as long as it stays Pending),
	// nor is one claiming a DeferRun that does not exist or another UID.
	for _, p := range []*corev1.Pod{
		mkPod("web-defer", labels("web")),
		mkPod("fake-defer", labels(run.Name)),
		mkPod("ghost-defer", labels("ghost"), metav1.OwnerReference{APIVersion: v1.GroupVersion.String(), Kind: "DeferRun", Name: "ghost", UID: "ghost-uid", Controller: ptr(true)}),
		mkPod("other-uid-defer", labels("sim-b3q9z"), metav1.OwnerReference{APIVersion: v1.GroupVersion.String(), Kind: "DeferRun", Name: "sim-b3q9z", UID: "not-its-uid", Controller: ptr(true)}),
	} {
		if err := evict(p); err != nil {
			t.Errorf("evicting pod %s, not a defer pod: %v", p.Name, err)
		} else if !gone(p) {
			t.Errorf("pod %s was not evicted", p.Name)
		}
	}
}
