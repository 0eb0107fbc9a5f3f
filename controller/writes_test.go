package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	ct "github.com/kdefer/kdefer/controller/testing/clienttest"
	"github.com/kdefer/kdefer/stagecontract"
)

// TestWritesPerRun counts the API writes of one pod's life under kdefer with
// a fake client, and checks the exact list: a regression guard for the
// write budget (see docs/design.md, "API writes per pod").
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
			run := w.getRun()
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
		return w.writes.Count(func(wr ct.Write) bool { return wr.Kind == "DeferRun" && wr.Subresource == "status" })
	}
	if got := statusWrites(); got != 0 {
		t.Fatalf("%d status writes before the bookkeeping pass, want 0: %v", got, w.writes.Writes())
	}
	w.clock.Step(time.Second)
	w.settle()
	run := w.getRun()
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
	run := w.getRun()
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

// TestNoSecretReads: runs with a credentials Secret never read it, not even
// its metadata: kdefer has no RBAC on Secrets (least privilege); a missing
// one is reported by the defer pod's kubelet (TestMissingSecret).
func TestNoSecretReads(t *testing.T) {
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
			if _, ok := obj.(*corev1.Secret); ok {
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
	for _, p := range pods {
		end(p)
	}
	if reads != 0 {
		t.Errorf("%d Secret reads for three runs, want none", reads)
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
	// kubectl drain (without --force) refuses a running pod without a
	// controller; the cluster autoscaler keeps a node for a pod whose
	// controller it does not know unless it is marked safe to evict.
	pp := &pods.Items[0]
	if refs := pp.OwnerReferences; len(refs) != 1 || refs[0].Kind != "DeferRun" || metav1.GetControllerOf(pp) == nil || *refs[0].BlockOwnerDeletion {
		t.Errorf("pre-pull pod owners %+v: want its run, as controller, non-blocking", refs)
	}
	if pp.Annotations[AnnotationSafeToEvict] != "true" {
		t.Errorf("pre-pull pod annotations %v: want %s=true", pp.Annotations, AnnotationSafeToEvict)
	}
	// The kubelet admits it on a node whose requests are full (issue #37):
	// it requests nothing, explicitly, and a memory limit keeps it off
	// BestEffort.
	for _, r := range requestedResources {
		if q, ok := pp.Spec.Containers[0].Resources.Requests[r]; !ok || !q.IsZero() {
			t.Errorf("pre-pull pod %s request %s (set %v), want an explicit zero", r, q.String(), ok)
		}
	}
	if pp.Spec.Containers[0].Resources.Limits.Memory().IsZero() {
		t.Errorf("pre-pull pod limits %v: want a memory limit", pp.Spec.Containers[0].Resources.Limits)
	}
	if got := w.writes.Count(func(w ct.Write) bool { return w.Kind == "Pod" && w.Verb == "create" }); got != 1 {
		t.Errorf("%d pod creates, want 1 pre-pull pod", got)
	}
}

// TestNoPrePullOnLeavingNode: a pod on a node being drained (cordoned, or
// tainted by a drain tool), or a pod on its way out, gets no pre-pull pod:
// it would be one more pod for the drain to evict.
func TestNoPrePullOnLeavingNode(t *testing.T) {
	cases := map[string]struct {
		node func(*corev1.Node)
		pod  func(*corev1.Pod)
	}{
		"cordoned": {node: func(n *corev1.Node) { n.Spec.Unschedulable = true }},
		"unschedulable taint": {node: func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}
		}},
		"cluster autoscaler scale-down": {node: func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}
		}},
		"pod marked for eviction": {pod: func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"})
		}},
		"pod being deleted": {pod: func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: time.Now()}, ptr.To(int64(30))
		}},
		"node gone": {node: func(n *corev1.Node) { n.Name = "other" }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			job, pod, pvc, n := worldObjects()
			if tc.node != nil {
				tc.node(n)
			}
			if tc.pod != nil {
				tc.pod(pod)
			}
			w := newFakeWorld(t, job, pod, pvc, n)
			w.pod.prePullImage = "kdefer.io/kdefer-stage:test"
			w.settle()
			var pods corev1.PodList
			if err := w.c.List(context.Background(), &pods, client.MatchingLabels{v1.LabelManaged: LabelManagedPrePull}); err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 0 {
				t.Errorf("pre-pull pod %s created on a node being drained", pods.Items[0].Name)
			}
		})
	}
}

// TestJobSummaryCoalesced: runs of a Job that finish together cost one
// summary write per summaryInterval, and the last one is never lost.
func TestJobSummaryCoalesced(t *testing.T) {
	job, _, _, _ := worldObjects()
	finished := func(name string) *v1.DeferRun {
		run := kt.MakeRun(name, "ns").Job("j").Trigger(v1.TriggerSucceeded, 0).Obj()
		run.Labels[labelJobUID] = string(job.UID)
		setCondition(&run.Status, 0, v1.DeferRunSucceeded, true, v1.ReasonSucceeded, "")
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
