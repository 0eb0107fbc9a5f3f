//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// TestIncompleteStageOut: stage-out is best effort, on a real kubelet. A
// pod leaves, beside its outputs, a file no one but root may read (mode
// 000) and one whose name makes a key longer than S3 allows. The good
// files are stored; the two others are listed in the manifest as unsaved,
// with their reasons; the run Succeeds, Incomplete, and keeps the volume
// until it is released by hand (kdefer.io/release).
func TestIncompleteStageOut(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "incomplete")
	w := small
	w.mode = "exit 0"
	job := s.job("sim", w)
	c := &job.Spec.Template.Spec.Containers[0]
	long := strings.Repeat("n", 250) // five levels of it: a key over 1,024 bytes
	c.Command[2] = `set -e; mkdir -p /kdefer/bad/` + strings.Repeat(long+"/", 5) + `
echo good > /kdefer/bad/good.txt
echo locked > /kdefer/bad/locked.txt && chmod 000 /kdefer/bad/locked.txt
echo long > /kdefer/bad/` + strings.Repeat(long+"/", 5) + `long.txt
set +e
` + c.Command[2]
	s.create(job)
	pod := s.waitReady(time.Minute)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunIncomplete); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Incomplete condition %+v, want True", c)
	}
	if run.Status.Unsaved != 2 {
		t.Errorf("status.unsaved %d, want 2", run.Status.Unsaved)
	}
	objs := s.checkOutputs("sim", pod, w, v1.TriggerSucceeded, "bad/good.txt")
	m, err := storage.ParseManifest(objs[stagecontract.ManifestKey].data)
	if err != nil {
		t.Fatal(err)
	}
	unsaved := map[string]string{}
	for _, u := range m.Unsaved {
		unsaved[u.Path] = u.Reason
	}
	longPath := "bad/" + strings.Repeat(long+"/", 5) + "long.txt"
	for path, reason := range map[string]string{"bad/locked.txt": "permission denied", longPath: "key is"} {
		if !strings.Contains(unsaved[path], reason) {
			t.Errorf("manifest unsaved[%.40s…] = %q, want a reason with %q (unsaved: %v)", path, unsaved[path], reason, unsaved)
		}
	}
	if len(unsaved) != 2 {
		t.Errorf("manifest lists %d unsaved files, want 2: %v", len(unsaved), unsaved)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("VolumeReleased condition %+v, want False (kept)", c)
	}
	s.pvcStaysGuarded(pod, 5*time.Second)
	s.logf("run Succeeded, Incomplete, %d unsaved, volume kept", run.Status.Unsaved)
	patch := []byte(`{"metadata":{"annotations":{"kdefer.io/release":"true"}}}`)
	if err := s.env.Client.Patch(s.ctx, run, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	s.volumeReleased(run)
	s.cleanUp("sim")
}
