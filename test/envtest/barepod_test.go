package envtest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	kt "github.com/kdefer/kdefer/controller/testing"
	ct "github.com/kdefer/kdefer/controller/testing/clienttest"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/test/envtest"
)

// TestBarePodDeferRun: a pod no Job made, opted in with kdefer's label and
// annotations as a CI runner's configuration adds them (no owner; an owner
// kdefer does not know, here a Tekton TaskRun), is rendered by the pod
// webhook as it is created, armed when its work PVC is created, and when it
// is evicted mid-run gets the same defer run a Job's pod gets: a DeferRun
// with no Job, a defer pod on its node, and the pod released once the run
// succeeds. The kubelet, the scheduler and the ephemeral-volume controller
// do not run under envtest: the test writes what they would.
func TestBarePodDeferRun(t *testing.T) {
	env := envtest.Start(t, envtest.WithWebhooks())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	serveWebhooks(t, ctx, env)
	startController(t, ctx, env)
	const node = "ci-node"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	must(t, env.Client.Create(ctx, n))
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	must(t, env.Client.Status().Update(ctx, n))
	ns := namespace(t, env, "ci")

	for name, owners := range map[string][]metav1.OwnerReference{
		"no owner": nil,
		"unknown owner": {{APIVersion: "tekton.dev/v1", Kind: "TaskRun", Name: "unit-tests", UID: "0c7e4a8e-4e1b-4c59-9d6a-3a1f0e9b2c11",
			Controller: ptr(true), BlockOwnerDeletion: ptr(true)}},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "runner-", Namespace: ns, OwnerReferences: owners,
					Labels: map[string]string{v1.LabelEnabled: "true"},
					Annotations: map[string]string{
						v1.AnnotationStageOut: "s3://ci/{namespace}/{pod}/{uid}/", v1.AnnotationInclude: "junit/*.xml",
						v1.AnnotationWorkMountPath: "/kdefer"}},
				Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "build", Image: "golang:1.26"}, {Name: "helper", Image: "runner-helper"}}},
			}
			must(t, env.Client.Create(ctx, pod))

			// Rendered as created: label, finalizer, retained work volume in
			// every container.
			if pod.Labels[v1.LabelManaged] != "true" || !slices.Contains(pod.Finalizers, v1.PodFinalizer) || pod.Annotations[v1.AnnotationRendered] == "" {
				t.Fatalf("pod not rendered: labels %v finalizers %v annotations %v", pod.Labels, pod.Finalizers, pod.Annotations)
			}
			if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].Ephemeral == nil || pod.Spec.Volumes[0].Name != v1.DefaultWorkVolumeName {
				t.Fatalf("work volume %+v", pod.Spec.Volumes)
			}
			for _, c := range pod.Spec.Containers {
				if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/kdefer" {
					t.Errorf("container %s mounts %+v", c.Name, c.VolumeMounts)
				}
			}

			// Running, with its work PVC: armed.
			must(t, ct.SetRunning(ctx, env.Client, pod))
			must(t, env.Client.Create(ctx, kt.ClaimFor(pod, v1.DefaultWorkVolumeName)))
			run := &v1.DeferRun{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns}}
			eventually(t, "the DeferRun", func() (bool, error) { return true, env.Client.Get(ctx, client.ObjectKeyFromObject(run), run) })
			if run.Spec.PodUID != pod.UID || run.Spec.JobName != "" || run.Labels[v1.LabelJobName] != "" || run.Spec.Policy.StageOut == nil {
				t.Errorf("run spec %+v labels %v", run.Spec, run.Labels)
			}

			// Evicted mid-run by the kubelet (node pressure).
			eventually(t, "the eviction written", func() (bool, error) {
				p := &corev1.Pod{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), p); err != nil {
					return false, err
				}
				kt.Terminate(p, 137, "Error", corev1.PodFailed, "Evicted")
				err := env.Client.Status().Update(ctx, p)
				return err == nil, err
			})
			dp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: v1.DeferPodName(run), Namespace: ns}}
			eventually(t, "the defer pod", func() (bool, error) { return true, env.Client.Get(ctx, client.ObjectKeyFromObject(dp), dp) })
			if dp.Spec.NodeName != node {
				t.Errorf("defer pod on node %q, want %q", dp.Spec.NodeName, node)
			}
			eventually(t, "the defer pod's status written", func() (bool, error) {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(dp), dp); err != nil {
					return false, err
				}
				kt.FinishDeferPod(dp, 0, 0, &stagecontract.StageSummary{Op: "out", Bytes: 10, Objects: 1, TotalBytes: 10,
					ManifestURL: "s3://ci/ci/" + pod.Name + "/_kdefer/manifest.json"}, false)
				err := env.Client.Status().Update(ctx, dp)
				return err == nil, err
			})
			eventually(t, "the run succeeded and the pod released", func() (bool, error) {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(run), run); err != nil {
					return false, err
				}
				if !meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunSucceeded) {
					return false, nil
				}
				// Released: the finalizer is gone, and after an eviction
				// (a pressure trigger) kdefer deletes the ended pod itself
				// so its volume goes (policy deleteEndedPod: OnPressure).
				p := &corev1.Pod{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), p); apierrors.IsNotFound(err) {
					return true, nil
				} else if err != nil {
					return false, err
				}
				return !slices.Contains(p.Finalizers, v1.PodFinalizer), nil
			})
			if run.Status.Trigger != v1.TriggerEvicted {
				t.Errorf("trigger %q, want %s", run.Status.Trigger, v1.TriggerEvicted)
			}
		})
	}
}

// startController runs kdefer's controllers as kdefer-controller wires them
// (without its webhooks, which serveWebhooks serves) until ctx ends.
func startController(t *testing.T, ctx context.Context, env *envtest.Env) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     scheme.New(),
		Cache:      controller.CacheOptions(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	must(t, err)
	must(t, controller.SetupWithManager(ctx, mgr, controller.Options{DeferPod: controller.DeferPodOptions{StageImage: renderOpts.StageImage}, Workers: 2}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond every 100 ms for up to 30 s.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok && err == nil {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
}
