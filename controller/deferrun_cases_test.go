package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

// A skip on the Job releases the volume and the pod without a defer pod.
func TestSkipAnnotationOnJob(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	job.Annotations = map[string]string{v1.AnnotationSkip: "true"}
	w := newFakeWorld(t, job, pod, pvc, n)
	w.settle()
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Failed().Obj().Status })
	w.settle()
	run := w.getRun()
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
	setAnnotation(run, v1.AnnotationRelease, "true")
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

// A missing credentials Secret: kdefer cannot read Secrets (least
// privilege), so the defer pod is created and the kubelet says the Secret
// is missing (CreateContainerConfigError); the run shows ConfigError naming
// it and the fix, keeps the volume, and proceeds once the Secret exists and
// the step starts. If the deadline passes first, the run fails with reason
// ConfigError.
func TestMissingSecret(t *testing.T) {
	waiting := func(dp *corev1.Pod) {
		dp.Status.Phase = corev1.PodPending
		dp.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: v1.StageOutStepName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "CreateContainerConfigError", Message: `secret "s3-creds" not found`}}}}
	}
	start := func(t *testing.T) (*fakeWorld, *corev1.Pod) {
		job, pod, pvc, n := worldObjects()
		pod.Annotations[v1.AnnotationCredentials] = "s3-creds"
		w := newFakeWorld(t, job, pod, pvc, n)
		w.settle()
		w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Succeeded().Obj().Status })
		w.settle()
		dp := &corev1.Pod{}
		if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, dp); err != nil {
			t.Fatalf("no defer pod: %v", err)
		}
		if dp.Spec.Containers[0].EnvFrom[0].SecretRef.Name != "s3-creds" {
			t.Errorf("stage-out envFrom %+v", dp.Spec.Containers[0].EnvFrom)
		}
		w.status(dp, func() { waiting(dp) })
		w.clock.Step(11 * time.Second)
		w.settle()
		run := &v1.DeferRun{}
		_ = w.c.Get(context.Background(), w.key, run)
		c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunConfigError)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1.ReasonSecretNotFound || !strings.Contains(c.Message, "ns/s3-creds") ||
			!strings.Contains(c.Message, "kubectl create secret generic s3-creds") {
			t.Fatalf("ConfigError condition %+v", c)
		}
		return w, dp
	}
	t.Run("created later", func(t *testing.T) {
		w, dp := start(t)
		writes := len(w.writes.Writes())
		w.clock.Step(11 * time.Second)
		w.settle()
		if n := len(w.writes.Writes()); n != writes {
			t.Errorf("%d writes while nothing changed", n-writes)
		}
		w.status(dp, func() {
			dp.Status.Phase = corev1.PodRunning
			dp.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		})
		w.settle()
		run := &v1.DeferRun{}
		_ = w.c.Get(context.Background(), w.key, run)
		if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunConfigError); c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonResolved {
			t.Errorf("ConfigError once the step runs: %+v", c)
		}
		w.status(dp, func() { kt.FinishDeferPod(dp, 0, 0, nil, false) })
		w.settle()
		_ = w.c.Get(context.Background(), w.key, run)
		if !meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunSucceeded) {
			t.Errorf("run not Succeeded: %+v", run.Status.Conditions)
		}
	})
	t.Run("deadline first", func(t *testing.T) {
		w, dp := start(t)
		w.status(dp, func() {
			dp.Status.Phase, dp.Status.Reason, dp.Status.Message = corev1.PodFailed, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
		})
		w.settle()
		run := &v1.DeferRun{}
		_ = w.c.Get(context.Background(), w.key, run)
		c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1.ReasonConfigError || !strings.Contains(c.Message, "ns/s3-creds") {
			t.Errorf("Failed condition %+v, want reason ConfigError naming the Secret", c)
		}
		if meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunVolumeReleased) {
			t.Error("volume released; the default onFailure is Retain")
		}
	})
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
	localPinned := pinned.DeepCopy()
	localPinned.Spec.Local = local.Spec.Local
	// A file system every node mounts at the same path (Lustre, GPFS; the
	// e2e cluster's kdefer-shared class) as a local PV of every node.
	shared := zonal.DeepCopy()
	shared.Spec.Local = local.Spec.Local
	shared.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0] = corev1.NodeSelectorRequirement{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}
	hostPath := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/d"}}}}
	for name, tc := range map[string]struct {
		pv   *corev1.PersistentVolume
		want bool
	}{
		"local": {local, true}, "zonal": {zonal, false}, "hostname affinity": {pinned, true},
		"local on its node": {localPinned, true}, "hostPath": {hostPath, true}, "local on every node": {shared, false},
	} {
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

	run := w.getRun()
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunSkipped); c == nil || c.Reason != v1.ReasonNamespaceDeleted {
		t.Fatalf("run conditions %+v, want Skipped with reason %s", run.Status.Conditions, v1.ReasonNamespaceDeleted)
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
	run := w.getRun()
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunSkipped); c == nil || c.Reason != v1.ReasonVolumeMissing || !strings.Contains(c.Message, pvc.Name) {
		t.Fatalf("run conditions %+v, want Skipped/%s naming %s", run.Status.Conditions, v1.ReasonVolumeMissing, pvc.Name)
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
