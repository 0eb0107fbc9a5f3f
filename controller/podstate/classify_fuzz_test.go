package podstate

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	rt "github.com/kdefer/kdefer/render/testing"
)

// FuzzClassify builds pods in arbitrary states from the fuzzer's choices and
// checks Classify's invariants: a done pod has a valid trigger, a skip is a
// deletion, a pod neither terminal nor deleting is never done, and the
// cache's stripped copy classifies the same.
func FuzzClassify(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint8(0), int32(0), uint8(0), int64(30), uint8(1))
	f.Add(uint8(2), uint8(1), uint8(3), int32(137), uint8(1), int64(0), uint8(2))
	f.Add(uint8(1), uint8(2), uint8(0), int32(143), uint8(2), int64(30), uint8(0))
	phases := []corev1.PodPhase{corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodPending, ""}
	reasons := []string{"", "Evicted", "DeadlineExceeded", "Terminated", "Shutdown", "UnexpectedAdmissionError"}
	conds := []string{"", "EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet", "SomethingNew"}
	creasons := []string{"Completed", "Error", "OOMKilled", "ContainerStatusUnknown"}
	f.Fuzz(func(t *testing.T, phase, reason, cond uint8, code int32, creason uint8, grace int64, shape uint8) {
		w := kt.MakePod("p", "ns").OnNode("n1")
		if shape&1 != 0 {
			w.Container("second")
		}
		if shape&2 != 0 {
			w.Sidecar("proxy")
		}
		if shape&4 != 0 {
			w.Terminated("main", code, creasons[int(creason)%len(creasons)], time.Minute)
		}
		if shape&8 != 0 {
			w.AllTerminated(code, creasons[int(creason)%len(creasons)])
		}
		w.Phase(phases[int(phase)%len(phases)]).Reason(reasons[int(reason)%len(reasons)], "")
		if c := conds[int(cond)%len(conds)]; c != "" {
			w.DisruptionTarget(c, "m")
		}
		if shape&16 != 0 {
			if grace < 0 {
				grace = -grace
			}
			w.Deleting(time.Duration(shape)*time.Second, grace%120)
		}
		if shape&32 != 0 {
			w.Spec.NodeName = ""
		}
		var job *batchv1.Job
		if shape&64 != 0 {
			job = rt.MakeJob("j", "ns").UID("uid-j").DeadlineExceeded().Obj()
		}
		pod := w.Obj()
		c := Classify(pod, job)
		terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
		switch {
		case c.Done && !c.Trigger.IsValid():
			t.Fatalf("done with invalid trigger %q", c.Trigger)
		case !c.Done && c.Trigger != "":
			t.Fatalf("not done but trigger %q", c.Trigger)
		case c.Skip && (c.Trigger != v1.TriggerDeleted || pod.DeletionTimestamp == nil):
			t.Fatalf("skip without a deletion: %+v", c)
		case c.Done && !terminal && pod.DeletionTimestamp == nil:
			t.Fatalf("done while neither terminal nor deleting: %+v", c)
		}
		stripped, _ := StripPod(pod.DeepCopy())
		if got := Classify(stripped.(*corev1.Pod), job); got.Done != c.Done || got.Trigger != c.Trigger || got.Skip != c.Skip {
			t.Fatalf("stripped pod classifies as %+v, full as %+v", got, c)
		}
	})
}
