package uninstall

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
)

// disarmer is one pass over the cluster once the controller is stopped.
type disarmer struct {
	c   client.Client
	o   Options
	now time.Time
	res *Result
	// seen are the pods whose run the pass handled (namespace/name).
	seen map[string]bool
}

func (d *disarmer) run(ctx context.Context) error {
	d.seen = map[string]bool{}
	var runs v1.DeferRunList
	if err := d.c.List(ctx, &runs); err != nil {
		return fmt.Errorf("listing DeferRuns: %w", err)
	}
	for i := range runs.Items {
		if err := d.disarmRun(ctx, &runs.Items[i]); err != nil {
			return err
		}
	}
	// Managed pods without a run: armed by the finalizer alone (no work
	// PVC yet, or the controller never saw them).
	var pods corev1.PodList
	if err := d.c.List(ctx, &pods, client.MatchingLabels{v1.LabelManaged: "true"}); err != nil {
		return fmt.Errorf("listing managed pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if d.seen[p.Namespace+"/"+p.Name] {
			continue
		}
		if err := d.releasePod(ctx, p, "it had no defer run: nothing was staged out"); err != nil {
			return err
		}
	}
	return d.deleteLeftovers(ctx)
}

// deleteLeftovers deletes what the controller makes for runs and would
// delete itself: the pre-pull pods (kdefer.io/managed=prepull), each
// namespace's PodDisruptionBudget of defer pods, and the
// kdefer.io/platform-policy label on namespaces. The runs they belong to
// may outlive kdefer (helm keeps the CRDs), and these with them.
func (d *disarmer) deleteLeftovers(ctx context.Context) error {
	var pods corev1.PodList
	if err := d.c.List(ctx, &pods, client.MatchingLabels{v1.LabelManaged: controller.LabelManagedPrePull}); err != nil {
		return fmt.Errorf("listing pre-pull pods: %w", err)
	}
	for i := range pods.Items {
		if err := d.c.Delete(ctx, &pods.Items[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting pre-pull pod %s/%s: %w", pods.Items[i].Namespace, pods.Items[i].Name, err)
		}
	}
	// The label that brings a namespace's plain Jobs to the platform
	// webhook: with kdefer gone it would mean nothing, and a reinstall
	// labels the namespaces its ClusterDeferPolicies select again.
	var nss corev1.NamespaceList
	if err := d.c.List(ctx, &nss, client.HasLabels{v1.LabelPlatformPolicy}); err != nil {
		return fmt.Errorf("listing namespaces labelled %s: %w", v1.LabelPlatformPolicy, err)
	}
	for i := range nss.Items {
		ns := &nss.Items[i]
		if err := patchRetrying(ctx, d.c, ns, func(ns *corev1.Namespace) { delete(ns.Labels, v1.LabelPlatformPolicy) }); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing %s from namespace %s: %w", v1.LabelPlatformPolicy, ns.Name, err)
		}
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := d.c.List(ctx, &pdbs); err != nil {
		return fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	for i := range pdbs.Items {
		p := &pdbs.Items[i]
		if p.Name != controller.DeferPDBName || !slices.ContainsFunc(p.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Kind == "DeferRun" }) {
			continue
		}
		if err := d.c.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting PodDisruptionBudget %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

// disarmRun decides what becomes of one run's volumes, then removes the
// finalizers of its pod and itself.
func (d *disarmer) disarmRun(ctx context.Context, run *v1.DeferRun) error {
	pod, err := podOf(ctx, d.c, run)
	if err != nil {
		return err
	}
	var note string
	switch {
	case !v1.Finished(run) && pod != nil && running(pod) && !meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunTriggered):
		// The pod runs on without kdefer: its volume goes with it, as an
		// ephemeral volume does. Without the work-volume label, the
		// admission policy that guards work volumes lets the garbage
		// collector delete it then, should the policy outlive kdefer.
		if err := d.eachClaim(ctx, run, func(pvc *corev1.PersistentVolumeClaim) error {
			return d.patchClaim(ctx, pvc, func(pvc *corev1.PersistentVolumeClaim) {
				pvc.OwnerReferences = without(pvc.OwnerReferences, run.UID)
				delete(pvc.Labels, v1.LabelWorkVolume)
			})
		}); err != nil {
			return err
		}
		note = "the pod runs on without kdefer: nothing will be staged out when it ends, and its work volume goes with it"
	case meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunVolumeReleased):
		note = fmt.Sprintf("its defer run had finished (%s)", v1.StateOf(&run.Status))
	case v1.Finished(run) && releaseDue(run, d.now):
		if err := d.eachClaim(ctx, run, func(pvc *corev1.PersistentVolumeClaim) error { return d.deleteClaim(ctx, pvc) }); err != nil {
			return err
		}
		note = fmt.Sprintf("its defer run had finished (%s); its work volume is released", v1.StateOf(&run.Status))
	default:
		kept, err := d.keep(ctx, run)
		if err != nil {
			return err
		}
		note = keptNote(run, kept)
	}
	if pod != nil {
		d.seen[pod.Namespace+"/"+pod.Name] = true
		if err := d.releasePod(ctx, pod, note); err != nil {
			return err
		}
	}
	if controllerutil.ContainsFinalizer(run, v1.DeferRunFinalizer) {
		err := patchRetrying(ctx, d.c, run, func(run *v1.DeferRun) { controllerutil.RemoveFinalizer(run, v1.DeferRunFinalizer) })
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing the finalizer of DeferRun %s/%s: %w", run.Namespace, run.Name, err)
		}
	}
	return nil
}

// releaseDue: a finished run whose volume the controller would release now.
func releaseDue(run *v1.DeferRun, now time.Time) bool {
	release, _ := controller.ShouldRelease(run, now)
	return release
}

// keep stops the run's defer pod (it could not finish in time; the files
// it had not stored are still on the volume) and keeps its work PVCs: with
// no owner, so that neither the pod's deletion nor the DeferRun's (when
// the CRD goes) deletes them, and labelled for `kdefer release`.
func (d *disarmer) keep(ctx context.Context, run *v1.DeferRun) ([]string, error) {
	if !v1.Finished(run) {
		if err := d.stopDeferPod(ctx, run); err != nil {
			return nil, err
		}
	}
	why := fmt.Sprintf("kdefer was uninstalled while DeferRun %s (pod %s) was %s: the files it had not staged out are on this volume. `kubectl kdefer release -n %s deferrun/%s` deletes it",
		run.Name, run.Spec.PodName, state(run), run.Namespace, run.Name)
	if v1.Finished(run) {
		why = fmt.Sprintf("kdefer was uninstalled while DeferRun %s (pod %s, %s) retained this volume by its policy. `kubectl kdefer release -n %s deferrun/%s` deletes it",
			run.Name, run.Spec.PodName, v1.StateOf(&run.Status), run.Namespace, run.Name)
	}
	var kept []string
	err := d.eachClaim(ctx, run, func(pvc *corev1.PersistentVolumeClaim) error {
		if err := d.patchClaim(ctx, pvc, func(pvc *corev1.PersistentVolumeClaim) {
			pvc.OwnerReferences = slices.DeleteFunc(pvc.OwnerReferences, func(r metav1.OwnerReference) bool {
				return r.UID == run.UID || (r.Kind == "Pod" && r.UID == run.Spec.PodUID)
			})
			metav1.SetMetaDataLabel(&pvc.ObjectMeta, v1.LabelKept, v1.LabelValue(run.Name))
			metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, v1.AnnotationKept, why)
		}); err != nil {
			return err
		}
		kept = append(kept, pvc.Name)
		d.res.Kept = append(d.res.Kept, pvc.Namespace+"/"+pvc.Name)
		d.o.Log.Info("keeping work volume", "pvc", pvc.Namespace+"/"+pvc.Name, "deferrun", run.Name, "state", state(run))
		return nil
	})
	return kept, err
}

// state is the run's state in a word; "Unfinished" before the controller
// recorded any (it writes a run's first status some seconds after the pod
// ended).
func state(run *v1.DeferRun) string {
	if s := v1.StateOf(&run.Status); s != "" {
		return s
	}
	return "Unfinished"
}

func keptNote(run *v1.DeferRun, kept []string) string {
	if len(kept) == 0 {
		return fmt.Sprintf("its defer run had not finished (%s) and its work volume is gone", state(run))
	}
	return fmt.Sprintf("its defer run was %s: work volume %s is kept (label %s); `kubectl kdefer release -n %s deferrun/%s` deletes it",
		state(run), strings.Join(kept, ", "), v1.LabelKept, run.Namespace, run.Name)
}

// stopDeferPod deletes the run's defer pod, if any.
func (d *disarmer) stopDeferPod(ctx context.Context, run *v1.DeferRun) error {
	pod := &corev1.Pod{}
	err := d.c.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v1.DeferPodName(run)}, pod)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the defer pod of %s/%s: %w", run.Namespace, run.Name, err)
	}
	if !v1.IsDeferPodOf(pod, run) || pod.DeletionTimestamp != nil {
		return nil
	}
	d.o.Log.Info("deleting unfinished defer pod", "pod", pod.Namespace+"/"+pod.Name)
	if err := d.c.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting defer pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// podOf returns the run's pod, nil when it is gone (or another pod has its
// name now).
func podOf(ctx context.Context, c client.Client, run *v1.DeferRun) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := c.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.PodName}, pod)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", run.Namespace, run.Spec.PodName, err)
	}
	if pod.UID != run.Spec.PodUID {
		return nil, nil
	}
	return pod, nil
}

// running: the pod's main containers may still write to the work volume.
func running(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// eachClaim calls f on each of the run's work PVCs that exists, is not
// being deleted and is still the run's (co-owned by it or its pod).
func (d *disarmer) eachClaim(ctx context.Context, run *v1.DeferRun, f func(*corev1.PersistentVolumeClaim) error) error {
	for _, v := range run.Spec.Volumes {
		pvc := &corev1.PersistentVolumeClaim{}
		err := d.c.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: v.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading work PVC %s/%s: %w", run.Namespace, v.ClaimName, err)
		}
		if pvc.DeletionTimestamp != nil || (!controller.HasOwner(pvc.OwnerReferences, run) && !owns(pvc.OwnerReferences, run.Spec.PodUID)) {
			continue
		}
		if err := f(pvc); err != nil {
			return err
		}
	}
	return nil
}

func (d *disarmer) patchClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, mutate func(*corev1.PersistentVolumeClaim)) error {
	if err := patchRetrying(ctx, d.c, pvc, mutate); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("updating work PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}

// patchRetrying patches obj with mutate under optimistic locking (a list
// such as finalizers or ownerReferences is replaced whole by a merge
// patch), reading it again when someone else wrote it first: the kubelet
// and the garbage collector still do, with the controller stopped.
func patchRetrying[T client.Object](ctx context.Context, c client.Client, obj T, mutate func(T)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		orig := obj.DeepCopyObject().(T)
		mutate(obj)
		err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) {
			if gerr := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); gerr != nil {
				return gerr
			}
		}
		return err
	})
}

// deleteClaim deletes a work PVC. The admission policy that guards work
// volumes (deploy/policy) lets only the controller delete one that carries
// the work-volume label, so the label goes first, as its message says.
func (d *disarmer) deleteClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if err := DeleteClaim(ctx, d.c, pvc); err != nil {
		return err
	}
	d.res.Released = append(d.res.Released, pvc.Namespace+"/"+pvc.Name)
	d.o.Log.Info("releasing work volume", "pvc", pvc.Namespace+"/"+pvc.Name)
	return nil
}

// releasePod removes kdefer's finalizer from the pod and records why in a
// Disarmed Event.
func (d *disarmer) releasePod(ctx context.Context, pod *corev1.Pod, note string) error {
	if !controllerutil.ContainsFinalizer(pod, v1.PodFinalizer) {
		return nil
	}
	if err := patchRetrying(ctx, d.c, pod, func(pod *corev1.Pod) { controllerutil.RemoveFinalizer(pod, v1.PodFinalizer) }); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("removing kdefer's finalizer from pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	d.res.Disarmed = append(d.res.Disarmed, pod.Namespace+"/"+pod.Name)
	d.o.Log.Info("disarmed pod", "pod", pod.Namespace+"/"+pod.Name)
	ev := &eventsv1.Event{
		// Named as client-go's recorders name theirs.
		ObjectMeta:          metav1.ObjectMeta{Namespace: pod.Namespace, Name: fmt.Sprintf("%s.%x", pod.Name, time.Now().UnixNano())},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: "kdefer.io/" + d.o.Reporter,
		ReportingInstance:   d.o.Reporter,
		Action:              "Uninstall",
		Reason:              v1.EventDisarmed,
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Note:                truncate("kdefer is being uninstalled: its finalizer "+v1.PodFinalizer+" is removed; "+note, 1024),
		Type:                corev1.EventTypeNormal,
	}
	if err := d.c.Create(ctx, ev); err != nil {
		// The pod is free; only the record is missing, and the log has it.
		d.o.Log.Error(err, "recording the Disarmed event", "pod", pod.Namespace+"/"+pod.Name)
	}
	return nil
}

func without(refs []metav1.OwnerReference, uid types.UID) []metav1.OwnerReference {
	return slices.DeleteFunc(slices.Clone(refs), func(r metav1.OwnerReference) bool { return r.UID == uid })
}

func owns(refs []metav1.OwnerReference, uid types.UID) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == uid })
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
