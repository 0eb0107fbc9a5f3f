package controller

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	ct "github.com/kdefer/kdefer/controller/testing/clienttest"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/resolve"
)

// fakeWorld runs the three reconcilers against a fake client, pass after
// pass until none of them writes, counting every write.
type fakeWorld struct {
	t      *testing.T
	c      client.Client
	base   client.Client // the kubelet's writes: not counted
	writes *ct.WriteCounter
	clock  *clocktesting.FakeClock
	pod    *PodReconciler
	run    *RunReconciler
	job    *JobReconciler
	key    client.ObjectKey
	jobKey client.ObjectKey
}

func newFakeWorld(t *testing.T, objs ...client.Object) *fakeWorld {
	return newFakeWorldWith(t, interceptor.Funcs{}, objs...)
}

// newFakeWorldWith is newFakeWorld with an interceptor that can make the
// API answer as a real apiserver would in a corner case.
func newFakeWorldWith(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *fakeWorld {
	s := scheme.New()
	base := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(funcs).
		WithStatusSubresource(&v1.DeferRun{}, &corev1.Pod{}).
		WithIndex(&v1.DeferPolicy{}, resolve.IndexNamespaceDefault, resolve.NamespaceDefaultIndex).
		WithIndex(&v1.DeferRun{}, IndexRunJob, func(o client.Object) []string { return []string{o.(*v1.DeferRun).Spec.JobName} }).
		WithIndex(&v1.DeferRun{}, IndexRunPolicy, func(o client.Object) []string { return []string{o.(*v1.DeferRun).Spec.PolicyName} }).
		WithObjects(objs...).Build()
	w := &fakeWorld{t: t, writes: &ct.WriteCounter{}, clock: clocktesting.NewFakeClock(time.Now())}
	w.c, w.base = w.writes.Wrap(base, s), base
	w.pod = NewPodReconciler(w.c, w.clock)
	w.run = NewRunReconciler(w.c, w.c, nil, w.clock, DeferPodOptions{StageImage: "img"})
	w.job = NewJobReconciler(w.c, w.c, w.clock)
	// settle reconciles the first pod and Job given (tests with more pods
	// point w.key at the one they drive).
	for i := len(objs) - 1; i >= 0; i-- {
		switch objs[i].(type) {
		case *corev1.Pod:
			w.key = client.ObjectKeyFromObject(objs[i])
		case *batchv1.Job:
			w.jobKey = client.ObjectKeyFromObject(objs[i])
		}
	}
	return w
}

// settle reconciles until a round makes no write.
func (w *fakeWorld) settle() {
	w.t.Helper()
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		before := len(w.writes.Writes())
		for _, r := range []reconcile.Reconciler{w.pod, w.run} {
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: w.key}); err != nil {
				w.t.Fatalf("reconcile: %v", err)
			}
		}
		if _, err := w.job.Reconcile(ctx, reconcile.Request{NamespacedName: w.jobKey}); err != nil {
			w.t.Fatalf("job reconcile: %v", err)
		}
		if len(w.writes.Writes()) == before {
			return
		}
	}
	w.t.Fatalf("the reconcilers never settle: %v", w.writes.Writes())
}

// getRun reads the run of w.key.
func (w *fakeWorld) getRun() *v1.DeferRun {
	w.t.Helper()
	run := &v1.DeferRun{}
	if err := w.c.Get(context.Background(), w.key, run); err != nil {
		w.t.Fatal(err)
	}
	return run
}

func (w *fakeWorld) status(obj client.Object, f func()) {
	w.t.Helper()
	if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		w.t.Fatal(err)
	}
	f()
	if err := w.base.Status().Update(context.Background(), obj); err != nil {
		w.t.Fatal(err)
	}
}

// removeByHand deletes pod past kdefer's finalizer, as someone removing
// the finalizer by hand would (not counted).
func (w *fakeWorld) removeByHand(pod *corev1.Pod) {
	w.t.Helper()
	pod.Finalizers = nil
	if err := w.base.Update(context.Background(), pod); err != nil {
		w.t.Fatal(err)
	}
	if err := w.base.Delete(context.Background(), pod); err != nil {
		w.t.Fatal(err)
	}
}

// createThroughArmer creates pvc as the ephemeral-volume controller would
// (not counted), armed as package webhook's PVCArmer arms it (counted).
func (w *fakeWorld) createThroughArmer(pvc *corev1.PersistentVolumeClaim) {
	w.t.Helper()
	out := pvc.DeepCopy()
	run, err := RunForNewClaim(context.Background(), w.c, w.c, pvc.Namespace, metav1.GetControllerOfNoCopy(pvc))
	if err != nil {
		w.t.Fatalf("arming at volume creation: %v", err)
	}
	if run != nil {
		ArmClaim(out, run)
	}
	if err := w.base.Create(context.Background(), out); err != nil {
		w.t.Fatal(err)
	}
}

func worldObjects() (*batchv1.Job, *corev1.Pod, *corev1.PersistentVolumeClaim, *corev1.Node) {
	job := rt.MakeJob("j", "ns").UID("uid-j").Obj()
	pod := kt.MakePod("j-x", "ns").OnNode("n1").OwnedByJob("j", job.UID).Obj()
	pvc := kt.ClaimFor(pod, v1.DefaultWorkVolumeName)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	return job, pod, pvc, n
}
