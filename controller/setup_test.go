package controller

import (
	"context"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// TestPDBDeleted: when the namespace's defer-pod PDB goes (with the run that
// owned it), the runs of defer pods that still run are enqueued to create
// it again; finished or deleting defer pods, managed pods and other PDBs
// enqueue nothing.
func TestPDBDeleted(t *testing.T) {
	deferPod := func(run string, phase corev1.PodPhase) *corev1.Pod {
		p := BuildDeferPod(kt.MakeRun(run, "ns").Trigger(v1.TriggerFailed, 1).Obj(), DeferPodOptions{})
		p.Status.Phase = phase
		return p
	}
	deleting := deferPod("deleting", corev1.PodRunning)
	deleting.Finalizers = []string{"test"}
	objs := []client.Object{
		deferPod("running", corev1.PodRunning),
		deferPod("pending", corev1.PodPending),
		deferPod("done", corev1.PodSucceeded),
		deleting,
		kt.MakePod("managed", "ns").Obj(),
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()
	if err := c.Delete(context.Background(), deleting); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		pdb  string
		want []string
	}{
		"the defer-pod PDB": {pdb: DeferPDBName, want: []string{"ns/pending", "ns/running"}},
		"another PDB":       {pdb: "someone-elses"},
	} {
		t.Run(name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			pdb := BuildDeferPDB(kt.MakeRun("owner", "ns").Obj())
			pdb.Name = tc.pdb
			pdbDeleted(c).Delete(context.Background(), ctrlevent.DeleteEvent{Object: pdb}, q)
			var got []string
			for q.Len() > 0 {
				req, _ := q.Get()
				got = append(got, req.String())
				q.Done(req)
			}
			sort.Strings(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("enqueued (-want +got):\n%s", diff)
			}
		})
	}
}
