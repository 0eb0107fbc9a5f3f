//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// TestStageOutAsPodUser: the main container runs as UID 1000 and writes its
// outputs with umask 077 (files 0600, directories 0700, as Python's
// tempfile.mkstemp + rename leaves them); the pod's fsGroup only lets it
// write the local PV. Stage-out must run as UID 1000 to read them: as the
// defer pod's default user (65532) every file is unreadable and the run
// fails with nothing uploaded.
func TestStageOutAsPodUser(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "user")
	w := small
	w.mode = "exit 0"
	job := s.job("sim", w)
	spec := &job.Spec.Template.Spec
	restrictedPod(spec, 3000, 3000, 2000)
	c := &spec.Containers[0]
	c.SecurityContext.RunAsUser, c.SecurityContext.RunAsGroup = ptr.To[int64](1000), ptr.To[int64](1000) // the container's user wins
	script := c.Command[2]
	// The outputs must really be private, or the test proves nothing.
	// (The directory inherits the setgid bit fsGroup sets on the volume: 2700.)
	check := `case "$(stat -c %a /kdefer/out/f0.dat) $(stat -c %a /kdefer/out)" in
600\ 700|600\ 2700) ;;
*) echo "outputs not private: $(ls -ld /kdefer/out /kdefer/out/f0.dat)"; exit 99 ;;
esac
`
	marker := "cd /kdefer/out && sha256sum"
	i := strings.Index(script, marker)
	if i < 0 {
		t.Fatalf("workload script changed: no %q to check the modes after", marker)
	}
	j := i + strings.Index(script[i:], "\n") + 1
	c.Command[2] = "umask 077\n" + script[:j] + check + script[j:]
	s.create(job)
	pod := s.waitReady(2 * time.Minute)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	want := &v1.StageUser{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), SupplementalGroups: []int64{1000, 2000}}
	if diff := cmp.Diff(want, run.Spec.StageUser); diff != "" {
		t.Errorf("DeferRun %s spec.stageUser (-want +got):\n%s", pod, diff)
	}
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	s.noFinalizer(pod)
	s.cleanUp("sim")
}
