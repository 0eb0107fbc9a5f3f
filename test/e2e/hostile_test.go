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
)

// TestHostileVolume: the main container is untrusted, and so is what it
// leaves in its work volume. On a real kubelet, a Job whose stage-out
// directory (kdefer.io/stage-out-path: out) the main container replaced
// with a link to / or with a FIFO gets a run that fails at once, naming the
// directory and what it is, uploads nothing (nothing of the defer pod's own
// file system above all) and keeps the volume; and a Job that mounts its
// work volume over kdefer's own mounts (/var/run, where the stage step's
// token and CA are) stages out as any other, with nothing of kdefer's in
// the bucket.
func TestHostileVolume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mountPath, replace, want string
	}{
		{"LinkToRoot", "", "mv /kdefer/out /kdefer/kept && ln -s / /kdefer/out", "symbolic link"},
		{"FIFO", "", "mv /kdefer/out /kdefer/kept && mkfifo /kdefer/out", "FIFO"},
		{"OverKdeferMounts", "/var/run", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScenario(t, "hostile-"+strings.ToLower(tc.name))
			mount := "/kdefer"
			if tc.mountPath != "" {
				mount = tc.mountPath
			}
			script := "set -e; mkdir -p " + mount + "/out; echo result > " + mount + "/out/f.txt\n"
			if tc.replace != "" {
				script += tc.replace + "\n"
			}
			script += "timeout 30 wget -q -O /dev/null " + s.sig.url + "/ready/$HOSTNAME\n"
			w := small
			w.mode = "exit 0" // replaced below: a Job of the scenarios' shape
			job := s.job("sim", w)
			job.Annotations[v1.AnnotationStageOutPath] = "out"
			if tc.mountPath != "" {
				job.Annotations[v1.AnnotationWorkMountPath] = tc.mountPath
			}
			job.Spec.Template.Spec = s.podSpec("job", script)
			s.create(job)
			pod := s.waitReady(time.Minute)
			prefix := s.ns + "/sim/" + pod + "/"
			if tc.want == "" {
				run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
				objs := s.objects(prefix)
				for k := range objs {
					if strings.Contains(k, "secrets") || strings.Contains(k, "token") || strings.Contains(k, "ca.crt") {
						t.Errorf("s3://%s/%s%s: kdefer's own file in the bucket", bucket, prefix, k)
					}
				}
				if string(objs["f.txt"].data) != "result\n" {
					t.Errorf("s3://%s/%sf.txt: %q, want the job's output", bucket, prefix, objs["f.txt"].data)
				}
				s.volumeReleased(run)
				s.cleanUp("sim")
				return
			}
			start := time.Now()
			run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunFailed, 3*time.Minute)
			c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
			if c == nil || !strings.Contains(c.Message, "/out") || !strings.Contains(c.Message, tc.want) {
				t.Errorf("Failed condition %+v: want the directory and %q named", c, tc.want)
			}
			s.logf("run failed %s after it was seen: %s", time.Since(start).Round(time.Second), steps(run))
			if objs := s.objects(prefix); len(objs) > 0 {
				var keys []string
				for k := range objs {
					keys = append(keys, k)
				}
				t.Errorf("s3://%s/%s holds %v: nothing should have been uploaded", bucket, prefix, keys)
			}
			if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased); c == nil || c.Status != metav1.ConditionFalse {
				t.Errorf("VolumeReleased condition %+v, want False (kept)", c)
			}
			patch := []byte(`{"metadata":{"annotations":{"kdefer.io/release":"true"}}}`)
			if err := s.env.Client.Patch(s.ctx, run, client.RawPatch(types.MergePatchType, patch)); err != nil {
				t.Fatal(err)
			}
			s.volumeReleased(run)
			s.cleanUp("sim")
		})
	}
}
