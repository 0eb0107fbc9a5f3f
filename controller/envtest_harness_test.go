package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	kt "github.com/kdefer/kdefer/controller/testing"
	ct "github.com/kdefer/kdefer/controller/testing/clienttest"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/test/envtest"
)

const node = "n1"

// harness is one apiserver, a client for the test (the kubelet, the Job
// controller and the user) and the real manager, which can be stopped and
// started again.
type harness struct {
	t       *testing.T
	env     *envtest.Env
	c       client.Client
	writes  *ct.WriteCounter
	mu      sync.Mutex
	stopMgr func()
	// deferPod are the defer pod options the manager starts with.
	deferPod controller.DeferPodOptions
}

// newHarness starts an apiserver of the test's own. Tests with a harness run
// in parallel (t.Parallel: they mostly wait on the manager's timers, and the
// package's tests one after another took 195 s, the unit tier's longest),
// except those that compare kdefer's metrics before and after
// (TestResume, TestDeferPodRefusedRecreated): the metrics are the process's,
// so another harness's manager would move them; Go runs such serial tests
// before the parallel ones start.
func newHarness(t *testing.T) *harness {
	env := envtest.Start(t)
	h := &harness{t: t, env: env, c: env.Client, writes: &ct.WriteCounter{},
		deferPod: controller.DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:test"}}
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	must(t, h.c.Create(ctx, n))
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	must(t, h.c.Status().Update(ctx, n))
	t.Cleanup(h.stop)
	return h
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// start runs the manager until stop (or a simulated crash).
func (h *harness) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopMgr != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The controllers as kdefer-controller wires them (cmd/kdefer-controller/app),
	// without the webhooks, probes and leader election.
	mgr, err := ctrl.NewManager(h.env.Config, ctrl.Options{
		Scheme:                  scheme.New(),
		Cache:                   controller.CacheOptions(),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		GracefulShutdownTimeout: ptr.To(10 * time.Second),
		Controller:              config.Controller{SkipNameValidation: ptr.To(true)},
		NewClient:               h.writes.NewClient,
	})
	must(h.t, err)
	must(h.t, controller.SetupWithManager(ctx, mgr, controller.Options{DeferPod: h.deferPod, Workers: 4}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			h.t.Logf("manager: %v", err)
		}
	}()
	h.stopMgr = func() { cancel(); <-done }
}

func (h *harness) stop() {
	h.mu.Lock()
	stop := h.stopMgr
	h.stopMgr = nil
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// eventually polls cond every 50 ms for up to 30 s. After a simulated
// crash it restarts the manager, as a Deployment would.
func (h *harness) eventually(what string, cond func() (bool, error)) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if h.writes.Crashed() {
			h.stop()
			h.writes.Recover()
			h.start()
		}
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
}

func (h *harness) namespace(name string) string {
	must(h.t, h.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	return name
}

// managedJobPod creates what render, the Job controller, the scheduler, the
// ephemeral-volume controller and the kubelet would: a Job, its managed pod
// running on the node, and the work PVC.
func (h *harness) managedJobPod(ns, name string, edit ...func(*corev1.Pod)) (*batchv1.Job, *corev1.Pod) {
	ctx := context.Background()
	job := rt.MakeJob(name, ns).Obj()
	job.Spec.Template.Labels = map[string]string{"app": name}
	job.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	job.Spec.ManualSelector = ptr.To(true)
	must(h.t, h.c.Create(ctx, job))
	pod := kt.MakePod(name+"-x", ns).OnNode(node).OwnedByJob(job.Name, job.UID).Obj()
	pod.UID = ""
	pod.Status = corev1.PodStatus{}
	for _, e := range edit {
		e(pod)
	}
	must(h.t, h.c.Create(ctx, pod))
	must(h.t, ct.SetRunning(ctx, h.c, pod))
	pvc := kt.ClaimFor(pod, v1.DefaultWorkVolumeName)
	must(h.t, h.c.Create(ctx, pvc))
	return job, pod
}

func (h *harness) get(obj client.Object) error {
	return h.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
}

func (h *harness) run(pod *corev1.Pod) *v1.DeferRun {
	return &v1.DeferRun{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
}

func (h *harness) waitArmed(pod *corev1.Pod) *v1.DeferRun {
	run := h.run(pod)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: pod.Name + "-" + v1.DefaultWorkVolumeName, Namespace: pod.Namespace}}
	h.eventually("run armed and PVC co-owned", func() (bool, error) {
		if err := h.get(run); err != nil {
			return false, err
		}
		if err := h.get(pvc); err != nil {
			return false, err
		}
		return controller.HasOwner(pvc.OwnerReferences, run), nil
	})
	return run
}

// updatePod applies f to the stored pod's status, retrying conflicts.
func (h *harness) updatePodStatus(pod *corev1.Pod, f func(*corev1.Pod)) {
	h.t.Helper()
	h.eventually("pod status written", func() (bool, error) {
		p := &corev1.Pod{}
		if err := h.c.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
			return false, err
		}
		f(p)
		err := h.c.Status().Update(context.Background(), p)
		return err == nil, err
	})
}

func (h *harness) deletePod(pod *corev1.Pod, grace int64) {
	must(h.t, client.IgnoreNotFound(h.c.Delete(context.Background(), pod, client.GracePeriodSeconds(grace))))
}

func (h *harness) waitDeferPod(run *v1.DeferRun) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: v1.DeferPodName(run), Namespace: run.Namespace}}
	h.eventually("defer pod created", func() (bool, error) { err := h.get(p); return err == nil, err })
	return p
}

// finishDeferPod ends the defer pod as the kubelet reports a pod whose
// containers exited: its stage container with code after restarts restarts.
func (h *harness) finishDeferPod(p *corev1.Pod, code int32, restarts int32, sum *stagecontract.StageSummary) {
	h.updatePodStatus(p, func(p *corev1.Pod) { kt.FinishDeferPod(p, code, restarts, sum, false) })
}

func (h *harness) waitFinished(run *v1.DeferRun, typ string) {
	h.eventually("run "+typ, func() (bool, error) {
		if err := h.get(run); err != nil {
			return false, err
		}
		if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed); c != nil && typ != v1.DeferRunFailed && c.Status == metav1.ConditionTrue {
			return false, fmt.Errorf("run failed: %s: %s", c.Reason, c.Message)
		}
		return meta.IsStatusConditionTrue(run.Status.Conditions, typ), nil
	})
}

// waitReleased waits for the pod finalizer to be gone and the PVC deleted
// (no PVC-protection controller runs here, so "deleting" counts).
func (h *harness) waitPodReleased(pod *corev1.Pod) {
	h.eventually("pod finalizer removed", func() (bool, error) {
		p := &corev1.Pod{}
		err := h.c.Get(context.Background(), client.ObjectKeyFromObject(pod), p)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return !controllerutilContains(p.Finalizers, v1.PodFinalizer), nil
	})
}

// pvcDeleting: the work PVC is deleted or being deleted, however.
func (h *harness) pvcDeleting(pod *corev1.Pod) bool {
	pvc := &corev1.PersistentVolumeClaim{}
	err := h.c.Get(context.Background(), types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name + "-" + v1.DefaultWorkVolumeName}, pvc)
	return apierrors.IsNotFound(err) || (err == nil && pvc.DeletionTimestamp != nil)
}

// pvcGone: the work PVC is released, deleted in the foreground.
func (h *harness) pvcGone(pod *corev1.Pod) (bool, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	err := h.c.Get(context.Background(), types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name + "-" + v1.DefaultWorkVolumeName}, pvc)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	// Deleted in the foreground, so that the garbage collector deletes the
	// defer pod the PVC owns before the PVC (envtest has no collector: the
	// finalizer stays).
	return err == nil && pvc.DeletionTimestamp != nil && controllerutilContains(pvc.Finalizers, metav1.FinalizerDeleteDependents), err
}

func controllerutilContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func env(p *corev1.Pod, name string) string {
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

var okSummary = &stagecontract.StageSummary{Op: "out", Bytes: 1234, Objects: 3, TotalBytes: 1234, ManifestURL: "s3://bucket/ns/p/_kdefer/manifest.json"}
