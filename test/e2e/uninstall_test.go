//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
	"github.com/kdefer/kdefer/test/repo"
)

// uninstallWait is the bound on runs in flight both removals are given
// (the chart's uninstall.wait in deploy/helm/local-values.yaml, and
// kubectl kdefer uninstall --wait): the stuck run outlasts it.
const uninstallWait = "30s"

// TestUninstall: kdefer is removed while runs are armed and in flight, by
// helm uninstall (the chart's pre-delete hook), then by kubectl kdefer
// uninstall and kubectl delete -f manifests.yaml (kustomize's local build,
// with the images run.sh installed). Each time: a run staging out when the
// removal starts finishes (its outputs in the bucket), a run that outlasts
// the wait has its volume kept (labelled, ownerless) until kdefer release,
// a running pod is disarmed; once the Jobs are deleted no pod is left
// Terminating and no PVC held. kdefer is installed again in between (by
// kubectl apply -f manifests.yaml) and after (as run.sh installed it); run.sh
// runs it with the scenarios that stop kdefer, apart from every other.
func TestUninstall(t *testing.T) {
	env := clusterenv.Require(t)
	ctx := context.Background()
	helm := helmReleased(ctx, t, env)
	manifests := localManifests(ctx, t, env)
	values := filepath.Join(t.TempDir(), "values.yaml")
	// kdefer back as run.sh installed it, whatever happened: a removal
	// that failed half-way may have left the controller scaled to zero, or
	// kdefer installed by kubectl.
	t.Cleanup(func() {
		switch {
		case helm && !helmReleased(ctx, t, env):
			if kdeferInstalled(ctx, env) {
				_, _ = kubectl(ctx, "delete", "-f", manifests, "--ignore-not-found", "--timeout=3m")
			}
			reinstallHelm(t, env, values)
		case kdeferInstalled(ctx, env):
			startKdefer(ctx, t)
		default:
			applyManifests(t, env, manifests)
		}
	})
	t.Run("Helm", func(t *testing.T) {
		if !helm {
			t.Skip("kdefer was not installed by helm (KDEFER_E2E_INSTALL=kustomize)")
		}
		uninstallInFlight(t, "uninst-helm", func(s *scenario, inFlight func()) {
			un := exec.CommandContext(s.ctx, program(t, "./test/helminstall"), "-uninstall", "-n", kdeferNS, "-save-values", values, "-timeout", "4m")
			out := &strings.Builder{}
			un.Stdout, un.Stderr = out, out
			if err := un.Start(); err != nil {
				t.Fatal(err)
			}
			// The hook runs: the staging run finishes while it waits.
			if err := clusterenv.WaitFor(s.ctx, time.Minute, "the pre-delete hook Job", func(ctx context.Context) (bool, error) {
				_, err := s.env.Clientset.BatchV1().Jobs(kdeferNS).Get(ctx, "kdefer-uninstall", metav1.GetOptions{})
				return err == nil, nil
			}); err != nil {
				t.Error(err)
			}
			inFlight()
			if err := un.Wait(); err != nil {
				logs, _ := kubectl(s.ctx, "-n", kdeferNS, "logs", "job/kdefer-uninstall")
				t.Fatalf("helm uninstall: %v\n%s\nhook logs:\n%s", err, out, logs)
			}
			s.logf("helm uninstall: %s", strings.TrimSpace(out.String()))
			// The hook's Job and roles are gone with it.
			if _, err := s.env.Clientset.RbacV1().ClusterRoles().Get(s.ctx, "kdefer-uninstall", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("ClusterRole kdefer-uninstall after helm uninstall: %v; want it deleted with the hook", err)
			}
			kdeferGone(t, s)
		}, func(s *scenario) {
			// The DeferRuns stay with the CRDs helm keeps: records, no
			// finalizer. Deleted before kdefer returns, which would act on
			// the unfinished ones.
			if err := s.env.Client.DeleteAllOf(s.ctx, &v1.DeferRun{}, client.InNamespace(s.ns)); err != nil {
				t.Error(err)
			}
			applyManifests(t, s.env, manifests)
		})
	})
	t.Run("Kubectl", func(t *testing.T) {
		if !kdeferInstalled(ctx, env) {
			applyManifests(t, env, manifests)
		}
		uninstallInFlight(t, "uninst-kubectl", func(s *scenario, inFlight func()) {
			un := exec.CommandContext(s.ctx, program(t, "./cmd/kdefer"), "--kubeconfig", clusterenv.Dir()+"/kubeconfig", "uninstall", "--wait", uninstallWait)
			out := &strings.Builder{}
			un.Stdout, un.Stderr = out, out
			if err := un.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
			inFlight()
			if err := un.Wait(); err != nil {
				t.Fatalf("kdefer uninstall: %v\n%s", err, out)
			}
			s.logf("kdefer uninstall:\n%s", out)
			if out, err := kubectl(s.ctx, "delete", "-f", manifests, "--timeout=3m"); err != nil {
				t.Fatalf("kubectl delete -f manifests.yaml: %v\n%s", err, out)
			}
			kdeferGone(t, s)
		}, func(s *scenario) {
			if helm {
				reinstallHelm(t, s.env, values)
			} else {
				applyManifests(t, s.env, manifests)
			}
		})
	})
}

// uninstallInFlight is one removal of kdefer (remove, which calls inFlight
// once the removal waits for runs in flight) with three Jobs: "staging"
// and "stuck", whose pods have ended and whose defer pods hold after the
// stage-out (the hold policy), and "running", whose pod runs. inFlight lets
// staging's defer pod end. reinstall brings kdefer back.
func uninstallInFlight(t *testing.T, prefix string, remove func(s *scenario, inFlight func()), reinstall func(s *scenario)) {
	s := newScenario(t, prefix)
	s.create(s.holdPolicy("hold"))
	ended := small
	ended.mode = "exit 0"
	for _, name := range []string{"staging", "stuck"} {
		job := s.job(name, ended)
		job.Annotations[v1.AnnotationPolicy] = "hold"
		s.create(job)
	}
	running := small
	running.mode = "wait 0"
	s.create(s.job("running", running))
	pods := map[string]string{}
	for len(pods) < 3 {
		r := s.waitReady(3 * time.Minute)
		for _, job := range []string{"staging", "stuck", "running"} {
			if p := strings.TrimPrefix(r, "defer-"); strings.HasPrefix(p, job+"-") && (job == "running") == (p == r) {
				pods[job] = p
			}
		}
	}
	s.waitRun(pods["running"], 30*time.Second, "armed", func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 })
	s.recordPVs()
	claim := func(job string) string { return pods[job] + "-" + v1.DefaultWorkVolumeName }
	s.logf("staging out: %s, %s; running: %s", pods["staging"], pods["stuck"], pods["running"])

	t0 := time.Now()
	remove(s, func() { s.sig.release("defer-" + pods["staging"]) })
	s.logf("kdefer removed in %s", time.Since(t0).Round(time.Second))

	for _, job := range []string{"staging", "stuck", "running"} {
		err := s.env.Clientset.BatchV1().Jobs(s.ns).Delete(s.ctx, job, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	// No pod left Terminating (nor at all: the defer pods went too).
	var left []string
	err := clusterenv.WaitFor(s.ctx, 90*time.Second, "every pod of "+s.ns+" gone", func(ctx context.Context) (bool, error) {
		list, err := s.env.Clientset.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		left = nil
		for _, p := range list.Items {
			left = append(left, fmt.Sprintf("%s (deleting %v, finalizers %v)", p.Name, p.DeletionTimestamp != nil, p.Finalizers))
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("%v; left: %s", err, strings.Join(left, ", "))
	}
	// Each pod kdefer still held has a Disarmed Event; the staging pod
	// was released by kdefer itself once its run finished.
	disarmed := disarmedPods(t, s)
	for _, job := range []string{"stuck", "running"} {
		if disarmed[pods[job]] == "" {
			t.Errorf("no %s Event on pod %s; events: %v", v1.EventDisarmed, pods[job], disarmed)
		}
	}
	s.logf("Disarmed events: %v", disarmed)
	// The run in flight finished and stored everything; the stuck one had
	// staged out too before it held (the policy's step after the stage-out).
	s.checkOutputs("staging", pods["staging"], ended, v1.TriggerSucceeded)
	s.checkOutputs("stuck", pods["stuck"], ended, v1.TriggerSucceeded)
	// The volumes of the finished run and of the running pod are gone;
	// the stuck run's is kept, ownerless and labelled, until kdefer release.
	for _, job := range []string{"staging", "running"} {
		err := clusterenv.WaitFor(s.ctx, time.Minute, "PVC "+claim(job)+" gone", func(ctx context.Context) (bool, error) {
			_, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).Get(ctx, claim(job), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	kept, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).Get(s.ctx, claim("stuck"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the stuck run's PVC: %v; want it kept", err)
	}
	if kept.Labels[v1.LabelKept] != pods["stuck"] || len(kept.OwnerReferences) > 0 || kept.DeletionTimestamp != nil {
		t.Errorf("the stuck run's PVC: labels %v, owners %v, deleting %v; want %s=%s and no owner", kept.Labels, kept.OwnerReferences, kept.DeletionTimestamp != nil, v1.LabelKept, pods["stuck"])
	}
	s.logf("kept: pvc %s: %s", kept.Name, kept.Annotations[v1.AnnotationKept])
	out, err := exec.CommandContext(s.ctx, program(t, "./cmd/kdefer"), "--kubeconfig", clusterenv.Dir()+"/kubeconfig", "-n", s.ns, "release", "deferrun/"+pods["stuck"]).CombinedOutput()
	if err != nil {
		t.Fatalf("kdefer release: %v\n%s", err, out)
	}
	s.logf("kdefer release: %s", strings.TrimSpace(string(out)))
	err = clusterenv.WaitFor(s.ctx, time.Minute, "kept PVC "+kept.Name+" gone", func(ctx context.Context) (bool, error) {
		_, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).Get(ctx, kept.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Error(err)
	}
	reinstall(s)
	s.noLeaks(2 * time.Minute)
}

// disarmedPods maps each pod of the scenario's namespace with a Disarmed
// Event to the Event's note.
func disarmedPods(t *testing.T, s *scenario) map[string]string {
	t.Helper()
	var events eventsv1.EventList
	if err := s.env.Client.List(s.ctx, &events, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range events.Items {
		if e.Reason == v1.EventDisarmed && e.Regarding.Kind == "Pod" {
			out[e.Regarding.Name] = e.Note
		}
	}
	return out
}

// helmReleased reports whether kdefer was installed by helm (its release's
// Secret is in kdefer-system).
func helmReleased(ctx context.Context, t *testing.T, env *clusterenv.Env) bool {
	t.Helper()
	list, err := env.Clientset.CoreV1().Secrets(kdeferNS).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=kdefer"})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items) > 0
}

// localManifests writes what the kubectl path installs and deletes,
// manifests.yaml: kustomize's build of deploy/overlays/local with the
// images the running controller has (run.sh's, from its registry).
func localManifests(ctx context.Context, t *testing.T, env *clusterenv.Env) string {
	t.Helper()
	dep, err := env.Clientset.AppsV1().Deployments(kdeferNS).Get(ctx, "kdefer-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	stage := ""
	for _, a := range c.Args {
		if s, ok := strings.CutPrefix(a, "--stage-image="); ok {
			stage = s
		}
	}
	out, err := kubectl(ctx, "kustomize", filepath.Join(repo.MustRoot(), "deploy/overlays/local"))
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/overlays/local: %v\n%s", err, out)
	}
	// The overlay names the images make images imports into a cluster
	// without a registry (kdefer.io/NAME:VERSION); the installed ones are
	// the release run.sh pushed.
	out = overlayImage(v1.ControllerImageName).ReplaceAllLiteralString(out, c.Image)
	out = overlayImage(v1.StageImageName).ReplaceAllLiteralString(out, stage)
	path := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// overlayImage matches deploy/overlays/local's reference to image name.
func overlayImage(name string) *regexp.Regexp {
	return regexp.MustCompile(`kdefer\.io/` + regexp.QuoteMeta(name) + `:[^\s"']+`)
}

func applyManifests(t *testing.T, env *clusterenv.Env, manifests string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	waitNamespacesGone(ctx, t, env)
	// Server-side, as docs/usage.md installs the CRDs: helm's copies of
	// them are still there.
	if out, err := kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", manifests); err != nil {
		t.Fatalf("kubectl apply -f manifests.yaml: %v\n%s", err, out)
	}
	waitKdeferReady(ctx, t)
}

func reinstallHelm(t *testing.T, env *clusterenv.Env, values string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	waitNamespacesGone(ctx, t, env)
	// The chart run.sh installed (lib.sh deploy_kdefer_helm): the released
	// one, whose defaults name the images it was released with.
	args := []string{"-n", kdeferNS, "-f", values}
	if chart := os.Getenv("KDEFER_E2E_CHART"); chart != "" {
		args = append(args, "--chart", chart, "--version", strings.TrimPrefix(os.Getenv("KDEFER_E2E_VERSION"), "v"))
	}
	out, err := exec.CommandContext(ctx, program(t, "./test/helminstall"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm install -f %s: %v\n%s", values, err, out)
	}
	waitKdeferReady(ctx, t)
}

// kdeferGone checks the controller's Deployment went with the removal.
func kdeferGone(t *testing.T, s *scenario) {
	t.Helper()
	if err := clusterenv.WaitFor(s.ctx, 2*time.Minute, "kdefer's namespaces gone", func(ctx context.Context) (bool, error) {
		return !namespacesLeft(ctx, s.env), nil
	}); err != nil {
		t.Error(err)
	}
}

func kdeferInstalled(ctx context.Context, env *clusterenv.Env) bool {
	dep := &appsv1.Deployment{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: kdeferNS, Name: "kdefer-controller"}, dep)
	return err == nil && dep.DeletionTimestamp == nil
}

func namespacesLeft(ctx context.Context, env *clusterenv.Env) bool {
	for _, ns := range []string{kdeferNS, "kdefer-node"} {
		if _, err := env.Clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return true
		}
	}
	return false
}

// waitNamespacesGone waits until a removal's namespaces are deleted: an
// install into a Terminating namespace fails.
func waitNamespacesGone(ctx context.Context, t *testing.T, env *clusterenv.Env) {
	t.Helper()
	if kdeferInstalled(ctx, env) {
		return
	}
	if err := clusterenv.WaitFor(ctx, 2*time.Minute, "kdefer's namespaces gone", func(ctx context.Context) (bool, error) {
		ns, err := env.Clientset.CoreV1().Namespaces().Get(ctx, kdeferNS, metav1.GetOptions{})
		if err == nil && ns.DeletionTimestamp == nil {
			return true, nil // there, not going
		}
		return !namespacesLeft(ctx, env), nil
	}); err != nil {
		t.Fatal(err)
	}
}

// waitKdeferReady waits as run.sh's kdefer_ready does: the controller
// rolled out and its CA in the webhook configurations, the node agents up.
func waitKdeferReady(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, args := range [][]string{
		{"-n", kdeferNS, "rollout", "status", "deployment/kdefer-controller", "--timeout=120s"},
		{"-n", "kdefer-node", "rollout", "status", "daemonset/kdefer-node", "--timeout=120s"},
	} {
		if out, err := kubectl(ctx, args...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
		err := clusterenv.WaitFor(ctx, time.Minute, kind+" kdefer's CA bundle", func(ctx context.Context) (bool, error) {
			out, err := kubectl(ctx, "get", kind, "kdefer", "-o", "jsonpath={.webhooks[*].clientConfig.caBundle}")
			return err == nil && len(strings.Fields(out)) > 0, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
