// Package uninstall takes kdefer's hold off a cluster before kdefer is
// removed, so that no pod stays Terminating under kdefer's finalizer and no
// work volume stays held by a controller that is gone. Run is the one
// routine behind both ways of removing kdefer: the chart's pre-delete hook
// (`kdefer-controller uninstall`) and `kubectl kdefer uninstall`, run before
// `kubectl delete -f manifests.yaml`.
//
// In order, it
//
//  1. waits, up to Options.Wait, while the controller still runs, for the
//     runs in flight (their pod has ended, the stage-out has not finished)
//     to finish and for the volumes due for release to be released;
//  2. stops the controller (scales its Deployment to zero), so that nothing
//     re-arms a pod behind it;
//  3. disarms: removes kdefer's finalizers from every managed pod (with a
//     Disarmed Event) and DeferRun, releases the volumes of finished runs,
//     lets the volume of a pod still running go with its pod, and keeps
//     the volumes of runs that had not finished (or that retained theirs):
//     it labels them kdefer.io/kept, with no owner, for `kdefer release`.
//
// It is idempotent: run again, after kdefer is gone, it skips the first two
// steps and disarms what is left (a pod a rendered Job started since).
package uninstall

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// +kubebuilder:rbac:groups=apps,namespace=kdefer-system,resources=deployments,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;patch;delete
// +kubebuilder:rbac:groups=kdefer.io,resources=deferruns,verbs=get;list;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;patch

// DefaultWait is how long Run waits for runs in flight unless told: well
// within `helm uninstall`'s default --timeout (5 minutes), which bounds the
// chart's hook.
const DefaultWait = 3 * time.Minute

// Options say which controller to stop and how long to wait for it.
type Options struct {
	// Wait bounds the wait for runs in flight (zero: no wait).
	Wait time.Duration
	// Namespace and Deployment name the controller's Deployment.
	Namespace, Deployment string
	// StopTimeout bounds the wait for the controller's pods to go.
	StopTimeout time.Duration
	// Poll is how often the waits look again (default 2 s).
	Poll time.Duration
	// Reporter names who disarmed, in Events (default kdefer-uninstall).
	Reporter string
	Log      logr.Logger
}

// Result is what Run did.
type Result struct {
	// Waited is how long it waited for runs in flight; Unfinished the runs
	// still in flight when it stopped waiting.
	Waited     time.Duration
	Unfinished int
	// Disarmed are the pods (namespace/name) whose finalizer it removed.
	Disarmed []string
	// Released are the work PVCs it deleted, Kept those it kept.
	Released, Kept []string
}

// Run waits for the runs in flight, stops the controller and disarms every
// managed pod and run through c.
func Run(ctx context.Context, c client.Client, o Options) (Result, error) {
	if o.Poll == 0 {
		o.Poll = 2 * time.Second
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 2 * time.Minute
	}
	if o.Reporter == "" {
		o.Reporter = "kdefer-uninstall"
	}
	var res Result
	dep, err := controllerDeployment(ctx, c, o)
	if err != nil {
		return res, err
	}
	if dep != nil && dep.Status.ReadyReplicas > 0 {
		res.Waited, res.Unfinished, err = waitInFlight(ctx, c, o)
		if err != nil {
			return res, err
		}
	} else {
		o.Log.Info("not waiting for runs in flight: the controller is not running", "deployment", o.Namespace+"/"+o.Deployment)
	}
	if dep != nil {
		if err := stopController(ctx, c, o, dep); err != nil {
			return res, err
		}
	}
	d := &disarmer{c: c, o: o, now: time.Now(), res: &res}
	if err := d.run(ctx); err != nil {
		return res, err
	}
	o.Log.Info("disarmed kdefer", "pods", len(res.Disarmed), "released", len(res.Released), "kept", len(res.Kept), "unfinished", res.Unfinished)
	return res, nil
}

func controllerDeployment(ctx context.Context, c client.Client, o Options) (*appsv1.Deployment, error) {
	dep := &appsv1.Deployment{}
	err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Deployment}, dep)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the controller's Deployment %s/%s: %w", o.Namespace, o.Deployment, err)
	}
	return dep, nil
}

// inFlight reports whether the running controller still has work on run:
// its pod has ended (or is gone) and the run has not finished, or it
// finished and its volume is due for release. The pod is read, not only
// the run's status: the controller records the trigger a few seconds after
// it starts the defer pod (its bookkeeping delay).
func inFlight(ctx context.Context, c client.Client, run *v1.DeferRun, now time.Time) (bool, error) {
	if v1.Finished(run) {
		if len(run.Spec.Volumes) == 0 || meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunVolumeReleased) {
			return false, nil
		}
		return releaseDue(run, now), nil
	}
	if meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunTriggered) ||
		meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunStagingOut) {
		return true, nil
	}
	pod, err := podOf(ctx, c, run)
	if err != nil {
		return false, err
	}
	return pod == nil || !running(pod), nil
}

// waitInFlight polls until no run is in flight or o.Wait has passed, and
// returns how long it waited and how many were still in flight.
func waitInFlight(ctx context.Context, c client.Client, o Options) (time.Duration, int, error) {
	start := time.Now()
	deadline := start.Add(o.Wait)
	for {
		var runs v1.DeferRunList
		if err := c.List(ctx, &runs); err != nil {
			return time.Since(start), 0, fmt.Errorf("listing DeferRuns: %w", err)
		}
		n := 0
		for i := range runs.Items {
			busy, err := inFlight(ctx, c, &runs.Items[i], time.Now())
			if err != nil {
				return time.Since(start), 0, err
			}
			if busy {
				n++
			}
		}
		if n == 0 || !time.Now().Before(deadline) {
			if n > 0 {
				o.Log.Info("stopping the wait with runs in flight", "inFlight", n, "waited", time.Since(start).Round(time.Second))
			}
			return time.Since(start), n, nil
		}
		o.Log.Info("waiting for runs in flight", "inFlight", n, "left", time.Until(deadline).Round(time.Second))
		select {
		case <-ctx.Done():
			return time.Since(start), n, fmt.Errorf("waiting for runs in flight: %w", ctx.Err())
		case <-time.After(o.Poll):
		}
	}
}

// stopController scales the controller to zero and waits until its pods
// are gone: a running controller would put the finalizer back on a pod
// that is still running.
func stopController(ctx context.Context, c client.Client, o Options, dep *appsv1.Deployment) error {
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 0 {
		o.Log.Info("stopping the controller", "deployment", o.Namespace+"/"+o.Deployment)
		orig := dep.DeepCopy()
		dep.Spec.Replicas = ptr.To[int32](0)
		if err := c.Patch(ctx, dep, client.MergeFrom(orig)); err != nil {
			return fmt.Errorf("scaling the controller's Deployment %s/%s to zero: %w", o.Namespace, o.Deployment, err)
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return fmt.Errorf("the controller's Deployment %s/%s: selector: %w", o.Namespace, o.Deployment, err)
	}
	deadline := time.Now().Add(o.StopTimeout)
	for {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(o.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return fmt.Errorf("listing the controller's pods: %w", err)
		}
		if len(pods.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the controller's pods (%s, e.g. %s) were still there %s after it was scaled to zero", sel, pods.Items[0].Name, o.StopTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the controller's pods to go: %w", ctx.Err())
		case <-time.After(o.Poll):
		}
	}
}
