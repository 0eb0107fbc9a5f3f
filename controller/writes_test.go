package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

// fakeWorld runs the three reconcilers against a fake client, pass after
// pass until none of them writes, counting every write.
type fakeWorld struct {
	t      *testing.T
	c      client.Client
	base   client.Client // the kubelet's writes: not counted
	writes *kt.WriteCounter
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
	s := Scheme()
	base := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(funcs).
		WithStatusSubresource(&v1.DeferRun{}, &corev1.Pod{}).
		WithIndex(&v1.DeferRun{}, IndexRunJob, func(o client.Object) []string { return []string{o.(*v1.DeferRun).Spec.JobName} }).
		WithIndex(&v1.DeferRun{}, IndexRunPolicy, func(o client.Object) []string { return []string{o.(*v1.DeferRun).Spec.PolicyName} }).
		WithObjects(objs...).Build()
	w := &fakeWorld{t: t, writes: &kt.WriteCounter{}, clock: clocktesting.NewFakeClock(time.Now())}
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
// (not counted), through PVCArmer's admission (counted).
func (w *fakeWorld) createThroughArmer(pvc *corev1.PersistentVolumeClaim) {
	w.t.Helper()
	raw, err := json.Marshal(pvc)
	if err != nil {
		w.t.Fatal(err)
	}
	resp := (&PVCArmer{Client: w.c, Reader: w.c}).Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: pvc.Namespace, Name: pvc.Name, Object: runtime.RawExtension{Raw: raw}}})
	if !resp.Allowed {
		w.t.Fatalf("PVC creation refused: %+v", resp.Result)
	}
	if len(resp.Patches) > 0 {
		ops, err := json.Marshal(resp.Patches)
		if err != nil {
			w.t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			w.t.Fatal(err)
		}
		if raw, err = p.Apply(raw); err != nil {
			w.t.Fatal(err)
		}
	}
	out := &corev1.PersistentVolumeClaim{}
	if err := json.Unmarshal(raw, out); err != nil {
		w.t.Fatal(err)
	}
	if err := w.base.Create(context.Background(), out); err != nil {
		w.t.Fatal(err)
	}
}

func worldObjects() (*batchv1.Job, *corev1.Pod, *corev1.PersistentVolumeClaim, *corev1.Node) {
	job := kt.MakeJob("j", "ns").Obj()
	job.Labels = map[string]string{v1.LabelEnabled: "true"}
	pod := kt.MakePod("j-x", "ns").OnNode("n1").OwnedByJob("j", job.UID).Obj()
	pvc := kt.ClaimFor(pod, v1.DefaultWorkVolumeName)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	return job, pod, pvc, n
}

// TestWritesPerRun counts the API writes of one pod's life under kdefer with
// a fake client, and checks the exact list: a regression guard for the
// write budget (see README.md, "API writes per pod").
func TestWritesPerRun(t *testing.T) {
	arm := []string{
		"create DeferRun ns/j-x",                         // arm
		"patch PersistentVolumeClaim ns/j-x-kdefer-work", // arm: second owner
	}
	// Armed by PVCArmer as the PVC is created: it is born co-owned.
	armWebhook := []string{"create DeferRun ns/j-x"}
	release := []string{
		"delete PersistentVolumeClaim ns/j-x-kdefer-work", // release
		"update DeferRun ns/j-x/status",                   // Succeeded (with the trigger on the fast path)
		"patch Job ns/j",                                  // summary (coalesced per Job)
		"patch Pod ns/j-x",                                // pod finalizer
	}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for name, tc := range map[string]struct {
		// pdbExists: another run of the namespace already created the
		// shared PodDisruptionBudget.
		pdbExists bool
		// fast: the defer pod is done before the bookkeeping pass.
		fast bool
		// webhook: the work PVC is created through PVCArmer.
		webhook bool
		want    []string
	}{
		"armed by the webhook": {pdbExists: true, webhook: true, want: cat(armWebhook, []string{
			"create Pod ns/j-x-defer",
			"update DeferRun ns/j-x/status",
		}, release)},
		"armed by the webhook, defer pod done before the bookkeeping pass": {pdbExists: true, webhook: true, fast: true, want: cat(armWebhook, []string{
			"create Pod ns/j-x-defer",
		}, release)},
		"first run of a namespace": {want: cat(arm, []string{
			"create Pod ns/j-x-defer",                       // the defer pod
			"create PodDisruptionBudget ns/" + DeferPDBName, // once per namespace, so drain waits
			"update DeferRun ns/j-x/status",                 // trigger and StagingOut
		}, release)},
		"any later run": {pdbExists: true, want: cat(arm, []string{
			"create Pod ns/j-x-defer",
			"update DeferRun ns/j-x/status",
		}, release)},
		"defer pod done before the bookkeeping pass": {pdbExists: true, fast: true, want: cat(arm, []string{
			"create Pod ns/j-x-defer",
		}, release)},
	} {
		t.Run(name, func(t *testing.T) {
			job, pod, pvc, n := worldObjects()
			objs := []client.Object{job, pod, n}
			if !tc.webhook {
				objs = append(objs, pvc)
			}
			if tc.pdbExists {
				objs = append(objs, BuildDeferPDB(kt.MakeRun("other", "ns").Obj()))
			}
			w := newFakeWorld(t, objs...)
			if tc.webhook {
				w.settle() // the pod alone: nothing to arm yet
				w.createThroughArmer(pvc)
			}
			w.settle()
			armed := len(w.writes.Writes())
			w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Succeeded().Obj().Status })
			if tc.fast {
				// Only the pass that creates the defer pod, then the pod is done.
				if _, err := w.run.Reconcile(context.Background(), reconcile.Request{NamespacedName: w.key}); err != nil {
					t.Fatal(err)
				}
			} else {
				w.settle()
			}
			dp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "j-x-defer", Namespace: "ns"}}
			w.status(dp, func() {
				kt.FinishDeferPod(dp, 0, 0, &stagecontract.StageSummary{Op: "out", Bytes: 5, Objects: 1}, false)
			})
			w.settle()

			var got []string
			for _, wr := range w.writes.Writes() {
				got = append(got, wr.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if wantArm := map[bool]int{false: 2, true: 1}[tc.webhook]; armed != wantArm {
				t.Errorf("arming took %d writes, want %d", armed, wantArm)
			}
			run := &v1.DeferRun{}
			if err := w.c.Get(context.Background(), w.key, run); err != nil {
				t.Fatal(err)
			}
			if run.Status.State != v1.DeferRunSucceeded || run.Status.Bytes != 5 || run.Status.Trigger != v1.TriggerSucceeded || run.Status.NodeName != "n1" {
				t.Fatalf("run status %+v", run.Status)
			}
		})
	}
}

// TestBookkeepingPostponed: a kubelet status update of a young defer pod
// writes nothing; the trigger and StagingOut are written once the defer pod
// is bookkeepingDelay old.
func TestBookkeepingPostponed(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	var w *fakeWorld
	w = newFakeWorldWith(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			obj.SetCreationTimestamp(metav1.NewTime(w.clock.Now())) // as the apiserver does
			return c.Create(ctx, obj, opts...)
		},
	}, job, pod, pvc, n)
	w.settle()
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Succeeded().Obj().Status })
	w.settle()
	dp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "j-x-defer", Namespace: "ns"}}
	w.status(dp, func() { dp.Status.Phase = corev1.PodRunning })
	w.clock.Step(bookkeepingDelay - time.Second)
	w.settle()
	statusWrites := func() int {
		return w.writes.Count(func(wr kt.Write) bool { return wr.Kind == "DeferRun" && wr.Subresource == "status" })
	}
	if got := statusWrites(); got != 0 {
		t.Fatalf("%d status writes before the bookkeeping pass, want 0: %v", got, w.writes.Writes())
	}
	w.clock.Step(time.Second)
	w.settle()
	run := &v1.DeferRun{}
	if err := w.c.Get(context.Background(), w.key, run); err != nil {
		t.Fatal(err)
	}
	if statusWrites() != 1 || run.Status.State != v1.DeferRunStagingOut || run.Status.Trigger != v1.TriggerSucceeded || run.Status.DeferPodName != "j-x-defer" {
		t.Errorf("after the bookkeeping pass: %d status writes, status %+v", statusWrites(), run.Status)
	}
}

// TestTTL: nothing happens before a finished run's TTL, the run goes after
// it.
func TestTTL(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	w := newFakeWorld(t, job, pod, pvc, n)
	w.settle()
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Succeeded().Obj().Status })
	w.settle()
	dp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "j-x-defer", Namespace: "ns"}}
	w.status(dp, func() {
		kt.FinishDeferPod(dp, 0, 0, &stagecontract.StageSummary{Op: "out", Bytes: 5, Objects: 1}, false)
	})
	w.settle()
	run := &v1.DeferRun{}
	if err := w.c.Get(context.Background(), w.key, run); err != nil {
		t.Fatal(err)
	}
	w.clock.Step(time.Duration(*run.Spec.Policy.TTLSecondsAfterFinished-1) * time.Second)
	w.settle()
	if err := w.c.Get(context.Background(), w.key, run); err != nil {
		t.Fatalf("run deleted before its TTL: %v", err)
	}
	w.clock.Step(2 * time.Second)
	w.settle()
	if err := w.c.Get(context.Background(), w.key, run); !apierrors.IsNotFound(err) {
		t.Fatalf("run not deleted after its TTL: %v", err)
	}
}

// A skip on the Job releases the volume and the pod without a defer pod.
func TestSkipAnnotationOnJob(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	job.Annotations = map[string]string{v1.AnnotationSkip: "true"}
	w := newFakeWorld(t, job, pod, pvc, n)
	w.settle()
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Failed().Obj().Status })
	w.settle()
	run := &v1.DeferRun{}
	if err := w.c.Get(context.Background(), w.key, run); err != nil {
		t.Fatal(err)
	}
	if run.Status.State != v1.DeferRunSkipped {
		t.Errorf("state %q, want Skipped", run.Status.State)
	}
	if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(pvc), pvc); !apierrors.IsNotFound(err) {
		t.Errorf("PVC not released: %v", err)
	}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("a defer pod was created for a skipped run: %v", err)
	}
	if err := w.c.Get(context.Background(), w.key, pod); err != nil || len(pod.Finalizers) != 0 {
		t.Errorf("pod finalizers %v (%v)", pod.Finalizers, err)
	}
}

// The node is gone: the run waits nodeLostTimeout, then fails with NodeLost
// and keeps the volume; the pod is still released.
func TestNodeLost(t *testing.T) {
	job, pod, pvc, _ := worldObjects()
	w := newFakeWorld(t, job, pod, pvc)
	w.settle()
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Failed().Obj().Status })
	w.settle()
	run := &v1.DeferRun{}
	_ = w.c.Get(context.Background(), w.key, run)
	if run.Status.State == v1.DeferRunFailed {
		t.Fatal("failed before the node timeout")
	}
	w.clock.Step(v1.DefaultNodeLostTimeout + time.Second)
	w.settle()
	_ = w.c.Get(context.Background(), w.key, run)
	if run.Status.State != v1.DeferRunFailed {
		t.Fatalf("state %q, want Failed", run.Status.State)
	}
	if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(pvc), pvc); err != nil {
		t.Errorf("PVC released after NodeLost; want retained: %v", err)
	}
	if err := w.c.Get(context.Background(), w.key, pod); err != nil || len(pod.Finalizers) != 0 {
		t.Errorf("pod finalizers %v (%v)", pod.Finalizers, err)
	}
}

// The node goes NotReady while the pod runs: after nodeLostTimeout the pod is
// triggered with NodeLost and the run fails at once if the node is still
// away, keeping the volume and releasing the pod.
func TestNodeLostTrigger(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	w := newFakeWorld(t, job, pod, pvc, n)
	w.settle()
	w.status(n, func() {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(w.clock.Now())}}
	})
	w.settle()
	run := &v1.DeferRun{}
	_ = w.c.Get(context.Background(), w.key, run)
	if run.Status.Trigger != "" {
		t.Fatalf("triggered %s before the timeout", run.Status.Trigger)
	}
	w.clock.Step(v1.DefaultNodeLostTimeout)
	w.settle()
	_ = w.c.Get(context.Background(), w.key, run)
	if run.Status.Trigger != v1.TriggerNodeLost || run.Status.State != v1.DeferRunFailed {
		t.Fatalf("trigger %q state %q, want NodeLost/Failed", run.Status.Trigger, run.Status.State)
	}
	if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(pvc), pvc); err != nil {
		t.Errorf("PVC released; want retained: %v", err)
	}
	if err := w.c.Get(context.Background(), w.key, pod); err != nil || len(pod.Finalizers) != 0 {
		t.Errorf("pod finalizers %v (%v)", pod.Finalizers, err)
	}
}

// A failed run keeps its volume; `kdefer release` (the annotation) deletes it
// and starts the TTL.
func TestReleaseByHand(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	w := newFakeWorld(t, job, pod, pvc, n)
	w.settle()
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Failed().Obj().Status })
	w.settle()
	dp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "j-x-defer", Namespace: "ns"}}
	w.status(dp, func() {
		kt.FinishDeferPod(dp, stagecontract.ExitPermanent, 0, &stagecontract.StageSummary{Op: "out", ErrorClass: "permanent", Error: "no such bucket"}, false)
	})
	w.settle()
	run := &v1.DeferRun{}
	_ = w.c.Get(context.Background(), w.key, run)
	if run.Status.State != v1.DeferRunFailed {
		t.Fatalf("state %q", run.Status.State)
	}
	if _, ok := TTLExpiry(run); ok {
		t.Error("TTL runs while the volume is retained")
	}
	if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(pvc), pvc); err != nil {
		t.Fatalf("PVC not retained: %v", err)
	}
	setAnnotation(run, AnnotationRelease, "true")
	if err := w.base.Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	w.settle()
	if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(pvc), pvc); !apierrors.IsNotFound(err) {
		t.Errorf("PVC not released by hand: %v", err)
	}
	_ = w.c.Get(context.Background(), w.key, run)
	if _, ok := TTLExpiry(run); !ok || run.Status.State != v1.DeferRunFailed {
		t.Errorf("after release: state %q, TTL running %v", run.Status.State, ok)
	}
}

// A missing credentials Secret: ConfigError naming it, volume kept, no defer
// pod; once the Secret exists the run proceeds.
func TestMissingSecret(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	pod.Annotations[v1.AnnotationCredentials] = "s3-creds"
	w := newFakeWorld(t, job, pod, pvc, n)
	w.settle()
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Succeeded().Obj().Status })
	w.settle()
	run := &v1.DeferRun{}
	_ = w.c.Get(context.Background(), w.key, run)
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunConfigError)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonSecretNotFound || !strings.Contains(c.Message, "ns/s3-creds") {
		t.Fatalf("ConfigError condition %+v", c)
	}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("defer pod created without its Secret: %v", err)
	}
	if err := w.base.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	w.clock.Step(11 * time.Second)
	w.settle()
	dp := &corev1.Pod{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, dp); err != nil {
		t.Fatalf("no defer pod once the Secret exists: %v", err)
	}
	if dp.Spec.Containers[0].EnvFrom[0].SecretRef.Name != "s3-creds" {
		t.Errorf("stage-out envFrom %+v", dp.Spec.Containers[0].EnvFrom)
	}
	_ = w.c.Get(context.Background(), w.key, run)
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunConfigError); c.Status != metav1.ConditionFalse {
		t.Errorf("ConfigError still %s", c.Status)
	}
}

// TestSecretReadOncePerBurst: runs that end together and share a
// credentials Secret read it from the apiserver once (Secrets are not
// cached), and again once secretTTL has passed.
func TestSecretReadOncePerBurst(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	pod2 := kt.MakePod("j-y", "ns").OnNode("n1").OwnedByJob("j", job.UID).Obj()
	pod3 := kt.MakePod("j-z", "ns").OnNode("n1").OwnedByJob("j", job.UID).Obj()
	var pods []*corev1.Pod
	objs := []client.Object{job, n, pvc, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: "ns"}}}
	for _, p := range []*corev1.Pod{pod, pod2, pod3} {
		p.Annotations[v1.AnnotationCredentials] = "s3-creds"
		pods = append(pods, p)
		objs = append(objs, p)
		if p != pod {
			objs = append(objs, kt.ClaimFor(p, v1.DefaultWorkVolumeName))
		}
	}
	reads := 0
	w := newFakeWorldWith(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok && m.Kind == "Secret" {
				reads++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}, objs...)
	w.jobKey = client.ObjectKeyFromObject(job)
	end := func(p *corev1.Pod) {
		w.key = client.ObjectKeyFromObject(p)
		w.settle()
		w.status(p, func() { p.Status = kt.MakePod(p.Name, "ns").Succeeded().Obj().Status })
		w.settle()
		if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: p.Name + "-defer"}, &corev1.Pod{}); err != nil {
			t.Fatalf("%s: no defer pod: %v", p.Name, err)
		}
	}
	end(pods[0])
	end(pods[1])
	if reads != 1 {
		t.Errorf("%d Secret reads for two runs within %s, want 1", reads, secretTTL)
	}
	w.clock.Step(secretTTL)
	end(pods[2])
	if reads != 2 {
		t.Errorf("%d Secret reads after %s, want 2", reads, secretTTL)
	}
}

// Pre-pull: one pod per namespace, node and image while armed pods run.
func TestPrePull(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	pod2 := kt.MakePod("j-y", "ns").OnNode("n1").OwnedByJob("j", job.UID).Obj()
	w := newFakeWorld(t, job, pod, pvc, n, pod2, kt.ClaimFor(pod2, v1.DefaultWorkVolumeName))
	w.pod.prePullImage = "kdefer.io/kdefer-stage:test"
	w.settle()
	w.key = client.ObjectKeyFromObject(pod2)
	w.settle()
	var pods corev1.PodList
	if err := w.c.List(context.Background(), &pods, client.MatchingLabels{v1.LabelManaged: LabelManagedPrePull}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "n1" || pods.Items[0].Spec.Containers[0].Image != "kdefer.io/kdefer-stage:test" {
		t.Fatalf("pre-pull pods: %+v", pods.Items)
	}
	if refs := pods.Items[0].OwnerReferences; len(refs) != 1 || refs[0].Kind != "DeferRun" || *refs[0].Controller || *refs[0].BlockOwnerDeletion {
		t.Errorf("pre-pull pod owners %+v: want its run, non-controller, non-blocking", refs)
	}
	if got := w.writes.Count(func(w kt.Write) bool { return w.Kind == "Pod" && w.Verb == "create" }); got != 1 {
		t.Errorf("%d pod creates, want 1 pre-pull pod", got)
	}
}

// The node is lost but the volume is network storage: after the timeout the
// defer pod is created without a node, for the scheduler to place.
func TestNodeLostRelocates(t *testing.T) {
	job, pod, pvc, _ := worldObjects()
	pvc.Spec.VolumeName = "pv-net"
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-net"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}}}}
	w := newFakeWorld(t, job, pod, pvc, pv)
	w.settle()
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Failed().Obj().Status })
	w.settle()
	dp := &corev1.Pod{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, dp); !apierrors.IsNotFound(err) {
		t.Fatalf("defer pod before the node timeout: %v", err)
	}
	w.clock.Step(v1.DefaultNodeLostTimeout + time.Second)
	w.settle()
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, dp); err != nil {
		t.Fatalf("no relocated defer pod: %v", err)
	}
	if dp.Spec.NodeName != "" {
		t.Errorf("relocated defer pod pinned to %q", dp.Spec.NodeName)
	}
	run := &v1.DeferRun{}
	_ = w.c.Get(context.Background(), w.key, run)
	if run.Status.State != v1.DeferRunStagingOut {
		t.Errorf("state %q, want StagingOut", run.Status.State)
	}
}

func TestNodeLocal(t *testing.T) {
	local := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/d"}}}}
	zonal := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}}}}
	pinned := zonal.DeepCopy()
	pinned.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Key = corev1.LabelHostname
	for name, tc := range map[string]struct {
		pv   *corev1.PersistentVolume
		want bool
	}{"local": {local, true}, "zonal": {zonal, false}, "hostname affinity": {pinned, true}} {
		if got := NodeLocal(tc.pv); got != tc.want {
			t.Errorf("%s: NodeLocal = %v, want %v", name, got, tc.want)
		}
	}
}

// The pod vanished before its node was known (its finalizer removed by
// hand): the run stages out what is there, the scheduler placing the defer
// pod.
func TestPodGoneWithoutNode(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	pod.Spec.NodeName = ""
	w := newFakeWorld(t, job, pod, pvc, n)
	w.settle()
	w.removeByHand(pod)
	w.settle()
	dp := &corev1.Pod{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, dp); err != nil {
		t.Fatalf("no defer pod: %v", err)
	}
	if dp.Spec.NodeName != "" || envOf(dp, stagecontract.EnvTrigger) != string(v1.TriggerDeleted) {
		t.Errorf("defer pod node %q trigger %q", dp.Spec.NodeName, envOf(dp, stagecontract.EnvTrigger))
	}
}

// TestNamespaceTerminating: a run whose namespace is being deleted cannot
// create its defer pod; it must end (Skipped) and let go of the pod and
// the volume instead of retrying forever (seen on the e2e cluster: the
// namespace hung in Terminating).
func TestNamespaceTerminating(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	w := newFakeWorldWith(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if p, ok := obj.(*corev1.Pod); ok && p.Name == "j-x-defer" {
				err := apierrors.NewForbidden(corev1.Resource("pods"), p.Name, fmt.Errorf("unable to create new content in namespace ns because it is being terminated"))
				err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
					Type: corev1.NamespaceTerminatingCause, Message: "namespace ns is being terminated", Field: "metadata.namespace"})
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
	}, job, pod, pvc, n)
	w.settle()
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Failed().Obj().Status })
	w.settle()

	run := &v1.DeferRun{}
	if err := w.c.Get(context.Background(), w.key, run); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunSkipped); c == nil || c.Reason != ReasonNamespaceDeleted {
		t.Fatalf("run conditions %+v, want Skipped with reason %s", run.Status.Conditions, ReasonNamespaceDeleted)
	}
	if !meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunVolumeReleased) {
		t.Errorf("volume not released: %+v", run.Status.Conditions)
	}
	got := &corev1.Pod{}
	if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if controllerutil.ContainsFinalizer(got, v1.PodFinalizer) {
		t.Errorf("pod still holds %s", v1.PodFinalizer)
	}
}

// TestVolumeNeverCreated: the arming webhook made the run, but the PVC's
// creation failed after it (a quota) and the pod was deleted before it got
// one. No defer pod could mount anything: the run is Skipped at once with
// a reason, rather than a defer pod Pending until its deadline.
func TestVolumeNeverCreated(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	w := newFakeWorld(t, job, pod, n)
	w.settle()
	w.createThroughArmer(pvc)
	if err := w.base.Delete(context.Background(), pvc); err != nil { // as if never stored
		t.Fatal(err)
	}
	w.settle()
	w.removeByHand(pod)
	w.settle()
	run := &v1.DeferRun{}
	if err := w.c.Get(context.Background(), w.key, run); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunSkipped); c == nil || c.Reason != ReasonVolumeMissing || !strings.Contains(c.Message, pvc.Name) {
		t.Fatalf("run conditions %+v, want Skipped/%s naming %s", run.Status.Conditions, ReasonVolumeMissing, pvc.Name)
	}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("a defer pod was made for a volume that does not exist: %v", err)
	}
	if _, ok := TTLExpiry(run); !ok {
		t.Error("the run never expires")
	}
}

func envOf(p *corev1.Pod, name string) string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// TestJobSummaryCoalesced: runs of a Job that finish together cost one
// summary write per summaryInterval, and the last one is never lost.
func TestJobSummaryCoalesced(t *testing.T) {
	job, _, _, _ := worldObjects()
	finished := func(name string) *v1.DeferRun {
		run := kt.MakeRun(name, "ns").Job("j").Trigger(v1.TriggerSucceeded, 0).Obj()
		run.Labels[labelJobUID] = string(job.UID)
		setCondition(&run.Status, 0, v1.DeferRunSucceeded, true, ReasonSucceeded, "")
		return run
	}
	w := newFakeWorld(t, job, finished("j-a"))
	ctx, req := context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(job)}
	summary := func() string {
		j := &batchv1.Job{}
		if err := w.c.Get(ctx, req.NamespacedName, j); err != nil {
			t.Fatal(err)
		}
		return j.Annotations[v1.AnnotationSummary]
	}
	steps := []struct {
		name        string
		before      func()
		wantSummary string
		wantRequeue bool
	}{
		{name: "first run finished", wantSummary: "1/1 staged out"},
		{name: "second run within the interval", before: func() {
			if err := w.base.Create(ctx, finished("j-b")); err != nil {
				t.Fatal(err)
			}
		}, wantSummary: "1/1 staged out", wantRequeue: true},
		{name: "interval passed", before: func() { w.clock.Step(summaryInterval) }, wantSummary: "2/2 staged out"},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		res, err := w.job.Reconcile(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := summary(); got != st.wantSummary || (res.RequeueAfter > 0) != st.wantRequeue {
			t.Errorf("%s: summary %q requeue %s, want %q requeue %v", st.name, got, res.RequeueAfter, st.wantSummary, st.wantRequeue)
		}
	}
	if got := w.writes.Total("patch", "Job"); got != 2 {
		t.Errorf("%d summary writes, want 2", got)
	}
}
