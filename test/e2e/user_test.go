//go:build e2e

package e2e

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
	w := small
	w.mode = "exit 0"
	endsAlone(t, "user", w, v1.TriggerSucceeded, func(s *scenario, spec *corev1.PodSpec) {
		spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To[int64](2000)}
		c := &spec.Containers[0]
		c.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000)}
		script := c.Command[2]
		// The outputs must really be private, or the test proves nothing.
		check := `[ "$(stat -c %a /kdefer/out/f0.dat)" = 600 ] && [ "$(stat -c %a /kdefer/out)" = 700 ] ||
  { echo "outputs not private: $(ls -ld /kdefer/out /kdefer/out/f0.dat)"; exit 99; }
`
		marker := "cd /kdefer/out && sha256sum"
		if !strings.Contains(script, marker) {
			t.Fatalf("workload script changed: no %q to check the modes after", marker)
		}
		i := strings.Index(script, marker)
		j := i + strings.Index(script[i:], "\n") + 1
		c.Command[2] = "umask 077\n" + script[:j] + check + script[j:]
	})
}
