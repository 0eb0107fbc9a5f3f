//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/test/clusterenv"
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

// TestKdeferNamesReserved: kdefer's containers and volumes are told apart
// from the user's by name, so on the real cluster a DeferPolicy whose defer
// container mounts kdefer's logs token and a Job whose template carries an
// init container named like kdefer's stage-in are refused at admission,
// naming the field; and a user defer container, run by a real kubelet in a
// defer pod beside kdefer's own steps, sees none of kdefer's volumes, no
// credentials and no API token (its log, archived in the bucket, says what
// it found; the work volume's mount is the control that it looked).
func TestKdeferNamesReserved(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "reserved")
	busybox := clusterenv.MustImage(t, "busybox")
	steal := &v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: s.ns},
		Spec: v1.DeferPolicySpec{DeferContainers: []corev1.Container{{
			Name: "steal", Image: busybox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"true"},
			VolumeMounts: []corev1.VolumeMount{{Name: v1.LogsTokenVolume, MountPath: "/token"}},
		}}},
	}
	s.refused(steal, "spec.deferContainers[0].volumeMounts[0].name", v1.LogsTokenVolume)

	w := small
	w.mode = "exit 0"
	forged := s.job("forged", w)
	forged.Spec.Template.Spec.InitContainers = []corev1.Container{{
		Name: v1.StageInContainerName + "-0", Image: busybox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"true"},
	}}
	s.refused(forged, "initContainers[0].name", v1.StageInContainerName)

	// What a defer container finds of kdefer's: mounts of kdefer's volumes
	// (the kubelet names a volume's directory after it), credentials in its
	// environment, an API token.
	look := `echo "work mount: $(grep -c ' /kdefer ' /proc/self/mountinfo)"
echo "kdefer mounts: $(grep -cE 'kdefer-logs-token|kdefer-tmp|kdefer-s3-ca' /proc/self/mountinfo)"
echo "credentials: $(env | grep -ciE 'AWS_|ACCESS_KEY|SECRET')"
echo "api token: $(ls /var/run/secrets/kubernetes.io/serviceaccount 2>/dev/null | wc -l)"
`
	s.create(&v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "look", Namespace: s.ns},
		Spec: v1.DeferPolicySpec{DeferContainers: []corev1.Container{{
			Name: "look", Image: busybox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sh", "-c", look},
		}}},
	})
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationPolicy] = "look"
	s.create(job)
	pod := s.waitReady(time.Minute)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	objs := s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	key := stagecontract.LogKey(v1.DeferPodName(run), stagecontract.LogRef{Container: "look"})
	got := string(objs[key].data)
	want := "work mount: 1\nkdefer mounts: 0\ncredentials: 0\napi token: 0\n"
	if got != want {
		t.Errorf("%s: the defer container found\n%s\nwant\n%s", key, got, want)
	}
	s.volumeReleased(run)
	s.cleanUp("sim")
}

// refused creates obj and wants admission to refuse it, naming the field
// and the name it may not use.
func (s *scenario) refused(obj client.Object, field, name string) {
	s.t.Helper()
	err := s.env.Client.Create(s.ctx, obj)
	if err == nil {
		s.t.Errorf("%T %s was admitted; want it refused naming %s", obj, obj.GetName(), field)
		return
	}
	if !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), name) {
		s.t.Errorf("%T %s refused with %q; want %s and %s named", obj, obj.GetName(), err, field, name)
	}
	s.logf("%T %s refused: %v", obj, obj.GetName(), err)
}
