package uninstall_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/test/envtest"
	"github.com/kdefer/kdefer/uninstall"
)

// world is one namespace of managed pods, their work PVCs and runs, on a
// real apiserver (no kubelet, no garbage collector: what Run writes is what
// the test reads).
type world struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	ns  string
}

// armed creates pod (as given), its work PVC co-owned by its run, and the
// run with the given conditions; it returns the run and the PVC.
func (w *world) armed(p *corev1.Pod, conds ...metav1.Condition) (*v1.DeferRun, *corev1.PersistentVolumeClaim) {
	w.t.Helper()
	status := p.Status
	must(w.t, w.c.Create(w.ctx, p))
	p.Status = status
	must(w.t, w.c.Status().Update(w.ctx, p))
	run := controller.BuildRun(p, "", v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://bucket/{pod}/"}}, "")
	must(w.t, w.c.Create(w.ctx, run))
	for _, c := range conds {
		c.LastTransitionTime = metav1.Now()
		meta.SetStatusCondition(&run.Status.Conditions, c)
	}
	run.Status.State = v1.StateOf(&run.Status)
	must(w.t, w.c.Status().Update(w.ctx, run))
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: run.Spec.Volumes[0].ClaimName, Namespace: w.ns,
			Labels: map[string]string{v1.LabelWorkVolume: v1.DefaultWorkVolumeName},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
				{APIVersion: v1.GroupVersion.String(), Kind: "DeferRun", Name: run.Name, UID: run.UID, Controller: ptr.To(false), BlockOwnerDeletion: ptr.To(false)},
			}},
		Spec: p.Spec.Volumes[0].Ephemeral.VolumeClaimTemplate.Spec,
	}
	must(w.t, w.c.Create(w.ctx, pvc))
	return run, pvc
}

func cond(typ string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: typ}
}

func pod(name, ns string) *corev1.Pod {
	p := kt.MakePod(name, ns).Obj()
	p.UID = ""
	return p
}

// TestRun: with the controller "running" (a Deployment with a ready
// replica), Run waits for the runs in flight, finishing one and giving up
// on another at the deadline, scales the controller to zero, then
// disarms: every pod and run loses kdefer's finalizer, with a Disarmed
// Event on each pod; a running pod's volume goes back to the pod alone;
// finished runs' volumes are released; unfinished and retained ones are
// kept, ownerless and labelled, and ReleaseKept deletes them.
func TestRun(t *testing.T) {
	env := envtest.Start(t)
	ctx := context.Background()
	c := env.Client
	for _, ns := range []string{"kdefer-system", "jobs"} {
		must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	// A namespace a ClusterDeferPolicy selected.
	platformNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform", Labels: map[string]string{v1.LabelPlatformPolicy: "site", "team": "a"}}}
	must(t, c.Create(ctx, platformNS))
	w := &world{t: t, ctx: ctx, c: c, ns: "jobs"}
	dep := controllerDeployment()
	must(t, c.Create(ctx, dep))
	dep.Status = appsv1.DeploymentStatus{Replicas: 1, ReadyReplicas: 1}
	must(t, c.Status().Update(ctx, dep))

	runningRun, runningPVC := w.armed(pod("running", w.ns), cond(v1.DeferRunArmed))
	ended := pod("stuck", w.ns)
	ended.Status.Phase = corev1.PodFailed
	stuckRun, stuckPVC := w.armed(ended, cond(v1.DeferRunArmed), cond(v1.DeferRunTriggered), cond(v1.DeferRunStagingOut))
	deferPod := pod(v1.DeferPodName(stuckRun), w.ns)
	deferPod.Labels = map[string]string{v1.LabelManaged: v1.ManagedDeferPod}
	deferPod.Annotations = map[string]string{v1.AnnotationDeferRunName: stuckRun.Name, v1.AnnotationDeferRunUID: string(stuckRun.UID)}
	deferPod.Finalizers = nil
	deferPod.Spec.Volumes = nil
	deferPod.Spec.Containers[0].VolumeMounts = nil
	must(t, c.Create(ctx, deferPod))
	finishing := pod("finishing", w.ns)
	finishing.Status.Phase = corev1.PodSucceeded
	finishingRun, _ := w.armed(finishing, cond(v1.DeferRunArmed), cond(v1.DeferRunTriggered))
	done := pod("done", w.ns)
	done.Status.Phase = corev1.PodSucceeded
	_, duePVC := w.armed(done, cond(v1.DeferRunArmed), cond(v1.DeferRunSucceeded))
	failed := pod("failed", w.ns)
	failed.Status.Phase = corev1.PodFailed
	failedRun, failedPVC := w.armed(failed, cond(v1.DeferRunArmed), cond(v1.DeferRunFailed))
	// Ended a moment ago: the controller has not recorded the trigger yet
	// (it does so a few seconds after it starts the defer pod).
	lagging := pod("lagging", w.ns)
	lagging.Status.Phase = corev1.PodSucceeded
	laggingRun, laggingPVC := w.armed(lagging)
	bare := pod("bare", w.ns)
	must(t, c.Create(ctx, bare))
	// What the controller makes for runs and deletes itself.
	prePull := pod("kdefer-prepull-0123", w.ns)
	prePull.Labels = map[string]string{v1.LabelManaged: controller.LabelManagedPrePull}
	prePull.Finalizers, prePull.Spec.Volumes, prePull.Spec.Containers[0].VolumeMounts = nil, nil, nil
	must(t, c.Create(ctx, prePull))
	pdb := controller.BuildDeferPDB(stuckRun)
	must(t, c.Create(ctx, pdb))

	// The "controller" finishes one run while Run waits.
	go func() {
		time.Sleep(3 * time.Second)
		r := &v1.DeferRun{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(finishingRun), r); err != nil {
			t.Error(err)
			return
		}
		for _, typ := range []string{v1.DeferRunSucceeded, v1.DeferRunVolumeReleased} {
			meta.SetStatusCondition(&r.Status.Conditions, cond(typ))
		}
		if err := c.Status().Update(ctx, r); err != nil {
			t.Error(err)
		}
	}()
	res, err := uninstall.Run(ctx, c, uninstall.Options{Wait: 6 * time.Second, Namespace: "kdefer-system", Deployment: "kdefer-controller",
		Poll: 500 * time.Millisecond, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("result: %+v", res)
	// "stuck" and "lagging" stayed in flight; so did "done" (its volume
	// due for release).
	if res.Unfinished != 3 || res.Waited < 5*time.Second {
		t.Errorf("waited %s with %d runs in flight at the end; want the whole 6 s with 3 (stuck, lagging, done)", res.Waited, res.Unfinished)
	}
	must(t, c.Get(ctx, client.ObjectKeyFromObject(dep), dep))
	if *dep.Spec.Replicas != 0 {
		t.Errorf("controller replicas %d after Run; want 0", *dep.Spec.Replicas)
	}

	// Every pod and run is free of kdefer's finalizers.
	var pods corev1.PodList
	must(t, c.List(ctx, &pods, client.InNamespace(w.ns)))
	for _, p := range pods.Items {
		if slices.Contains(p.Finalizers, v1.PodFinalizer) {
			t.Errorf("pod %s still has %s", p.Name, v1.PodFinalizer)
		}
	}
	var runs v1.DeferRunList
	must(t, c.List(ctx, &runs, client.InNamespace(w.ns)))
	for _, r := range runs.Items {
		if slices.Contains(r.Finalizers, v1.DeferRunFinalizer) {
			t.Errorf("DeferRun %s still has %s", r.Name, v1.DeferRunFinalizer)
		}
	}
	for _, r := range runs.Items {
		if r.Status.State == "" && r.Name != laggingRun.Name {
			t.Errorf("DeferRun %s lost its status: %+v", r.Name, r.Status)
		}
	}
	if len(res.Disarmed) != 7 {
		t.Errorf("disarmed %v; want the 7 managed pods", res.Disarmed)
	}
	var events eventsv1.EventList
	must(t, c.List(ctx, &events, client.InNamespace(w.ns)))
	disarmed := map[string]string{}
	for _, e := range events.Items {
		if e.Reason == v1.EventDisarmed {
			disarmed[e.Regarding.Name] = e.Note
		}
	}
	for _, p := range []string{"running", "stuck", "lagging", "finishing", "done", "failed", "bare"} {
		if disarmed[p] == "" {
			t.Errorf("no %s Event on pod %s", v1.EventDisarmed, p)
		}
	}
	t.Logf("events: %v", disarmed)

	// The running pod's volume is its pod's alone, and no longer guarded.
	must(t, c.Get(ctx, client.ObjectKeyFromObject(runningPVC), runningPVC))
	if controller.HasOwner(runningPVC.OwnerReferences, runningRun) || len(runningPVC.OwnerReferences) != 1 || runningPVC.Labels[v1.LabelWorkVolume] != "" {
		t.Errorf("running pod's PVC: owners %v, labels %v; want its pod only and no %s", runningPVC.OwnerReferences, runningPVC.Labels, v1.LabelWorkVolume)
	}
	// The finished run's volume is released.
	if !deleted(ctx, c, duePVC) {
		t.Errorf("finished run's PVC %s not deleted", duePVC.Name)
	}
	// The unfinished and the retained ones are kept: no owner, labelled.
	for _, k := range []struct {
		run *v1.DeferRun
		pvc *corev1.PersistentVolumeClaim
	}{{stuckRun, stuckPVC}, {laggingRun, laggingPVC}, {failedRun, failedPVC}} {
		must(t, c.Get(ctx, client.ObjectKeyFromObject(k.pvc), k.pvc))
		if len(k.pvc.OwnerReferences) != 0 || k.pvc.Labels[v1.LabelKept] != k.run.Name || k.pvc.Annotations[v1.AnnotationKept] == "" {
			t.Errorf("PVC %s of %s: owners %v, labels %v; want none and %s=%s", k.pvc.Name, k.run.Name, k.pvc.OwnerReferences, k.pvc.Labels, v1.LabelKept, k.run.Name)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(deferPod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("the unfinished run's defer pod: %v; want it deleted", err)
	}
	if len(res.Kept) != 3 || len(res.Released) != 1 {
		t.Errorf("kept %v, released %v; want 3 and 1", res.Kept, res.Released)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(prePull), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("pre-pull pod: %v; want it deleted", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pdb), pdb); !apierrors.IsNotFound(err) {
		t.Errorf("PodDisruptionBudget %s: %v; want it deleted", pdb.Name, err)
	}

	must(t, c.Get(ctx, client.ObjectKeyFromObject(platformNS), platformNS))
	if _, ok := platformNS.Labels[v1.LabelPlatformPolicy]; ok || platformNS.Labels["team"] != "a" {
		t.Errorf("namespace %s labels %v; want %s removed, the others kept", platformNS.Name, platformNS.Labels, v1.LabelPlatformPolicy)
	}

	// kdefer release frees a kept volume, even with its run gone.
	must(t, c.Delete(ctx, stuckRun))
	names, err := uninstall.ReleaseKept(ctx, c, w.ns, stuckRun.Name)
	if err != nil || len(names) != 1 || names[0] != stuckPVC.Name {
		t.Fatalf("ReleaseKept: %v, %v; want [%s]", names, err, stuckPVC.Name)
	}
	if !deleted(ctx, c, stuckPVC) {
		t.Errorf("kept PVC %s not deleted by ReleaseKept", stuckPVC.Name)
	}

	// Again, kdefer gone: nothing to wait for, nothing left to do.
	res, err = uninstall.Run(ctx, c, uninstall.Options{Wait: time.Minute, Namespace: "kdefer-system", Deployment: "none", Log: testr.New(t)})
	if err != nil || res.Waited != 0 || len(res.Disarmed)+len(res.Released)+len(res.Kept) != 0 {
		t.Errorf("second Run: %+v, %v; want nothing done", res, err)
	}
}

// deleted: gone, or being deleted (the apiserver's pvc-protection
// finalizer stays: no controller here removes it).
func deleted(ctx context.Context, c client.Client, pvc *corev1.PersistentVolumeClaim) bool {
	got := &corev1.PersistentVolumeClaim{}
	err := c.Get(ctx, client.ObjectKeyFromObject(pvc), got)
	return apierrors.IsNotFound(err) || (err == nil && got.DeletionTimestamp != nil)
}

func controllerDeployment() *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": "kdefer", "app.kubernetes.io/component": "controller"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "kdefer-controller", Namespace: "kdefer-system"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "kdefer-controller"}}},
			},
		},
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
