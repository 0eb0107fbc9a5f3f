//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
	"github.com/kdefer/kdefer/test/s3server"
)

// TestMinIORestartedDuringUpload: the S3 server (this test's own MinIO on
// the node address) is killed while stage-out uploads and started again;
// the run retries, every byte arrives, and the upload resumes: the objects
// stored before the restart are not written again (their Last-Modified and
// ETag are what they were), so a stage-out that started over would fail it.
func TestMinIORestartedDuringUpload(t *testing.T) {
	t.Parallel()
	clusterenv.Require(t)
	srv := s3server.StartWith(t, s3server.Options{Host: clusterenv.NodeIP})
	s := newScenario(t, "minio", withS3(srv.Addr()))
	w := workload{files: 48, size: 4 << 20, mode: "exit 0"}
	s.create(s.job("sim", w))
	pod := s.waitReady(2 * time.Minute)
	prefix := s.ns + "/sim/" + pod + "/"
	// Kill the server once a fifth of the objects have arrived (a tight
	// poll: the upload is quick); what the last listing saw was stored
	// before the kill.
	deadline := time.Now().Add(2 * time.Minute)
	before := map[string]minio.ObjectInfo{}
	for len(before) < w.files/5 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d objects uploaded within 2m", w.files/5)
		}
		clear(before)
		for o := range s.mc.ListObjects(s.ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err == nil {
				before[o.Key] = o
			}
		}
		if len(before) < w.files/5 {
			time.Sleep(20 * time.Millisecond) // polling interval
		}
	}
	srv.Kill()
	n := len(before)
	s.logf("MinIO killed with %d of %d objects uploaded", n, w.files+2)
	if n >= w.files+2 {
		t.Errorf("the upload was over before MinIO was killed: the scenario tested nothing")
	}
	srv.Restart()
	s.logf("MinIO restarted")
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	s.logf("steps: %s", steps(run))
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	rewritten := 0
	for o := range s.mc.ListObjects(s.ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if b, ok := before[o.Key]; ok && (!o.LastModified.Equal(b.LastModified) || o.ETag != b.ETag) {
			rewritten++
			t.Errorf("s3://%s/%s written again after the restart (Last-Modified %s, then %s): the upload did not resume",
				bucket, o.Key, b.LastModified.Format(time.RFC3339Nano), o.LastModified.Format(time.RFC3339Nano))
		}
	}
	s.logf("of the %d objects stored before the restart, %d written again", n, rewritten)
	s.volumeReleased(run)
	s.cleanUp("sim")
}

// TestDeferContainerPostsResult: a user defer container (a CI step) posts
// the outcome to a receiver run by the test, after the built-in stage-out,
// with busybox wget (bounded by timeout: Debian busybox's wget -T crashes).
func TestDeferContainerPostsResult(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "notify")
	busybox := clusterenv.MustImage(t, "busybox")
	s.create(&v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "ci", Namespace: s.ns},
		Spec: v1.DeferPolicySpec{DeferContainers: []corev1.Container{{
			Name: "notify", Image: busybox, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sh", "-c", `timeout 20 wget -q -O /dev/null --post-data "$KDEFER_POD $KDEFER_TRIGGER $KDEFER_EXIT_CODE $(wc -l < /kdefer/out/SHA256SUMS)" ` + s.sig.url + `/result`},
		}}},
	})
	w := small
	w.mode = "exit 3"
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationPolicy] = "ci"
	s.create(job)
	pod := s.waitReady(time.Minute)
	got := s.waitResult(2 * time.Minute)
	if want := fmt.Sprintf("%s Failed 3 %d", pod, w.files); strings.TrimSpace(got) != want {
		t.Errorf("defer container posted %q, want %q", got, want)
	}
	run := s.waitFinished(pod, v1.TriggerFailed, v1.DeferRunSucceeded, 2*time.Minute)
	if len(run.Status.Steps) != 2 || run.Status.Steps[1].Name != "notify" || run.Status.Steps[1].ExitCode == nil || *run.Status.Steps[1].ExitCode != 0 {
		t.Errorf("steps %s: want stage-out then notify, exit 0", steps(run))
	}
	s.checkOutputs("sim", pod, w, v1.TriggerFailed)
	s.volumeReleased(run)
	s.cleanUp("sim")
}

// TestStageInNoCredentials: stage-in downloads a dataset for a main
// container that is a single static binary in a FROM-scratch image; the
// credentials reach only kdefer's stage-in container: the main container's
// environment and every file it can read hold none of them.
func TestStageInNoCredentials(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "stagein")
	img := inspectImage(t, s.env)
	inputs := map[string][]byte{}
	for i := range 4 {
		name := fmt.Sprintf("event-%d.dat", i)
		inputs[name] = bytes.Repeat([]byte(fmt.Sprintf("event %d energy=%d\n", i, 100+i)), 20000)
		if _, err := s.mc.PutObject(s.ctx, bucket, s.ns+"/dataset/"+name, bytes.NewReader(inputs[name]), int64(len(inputs[name])), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w := workload{mode: "exit 0"} // the container is replaced below
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationStageIn] = "s3://" + bucket + "/" + s.ns + "/dataset/" + s.s3Query()
	rev := func(x string) string {
		b := []byte(x)
		for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
			b[i], b[j] = b[j], b[i]
		}
		return string(b)
	}
	job.Spec.Template.Spec.Containers[0] = corev1.Container{
		Name: "main", Image: img, ImagePullPolicy: corev1.PullNever,
		Env: []corev1.EnvVar{
			{Name: "KDEFER_E2E_READY", Value: s.sig.url + "/ready/inspect"},
			{Name: "KDEFER_E2E_LOOK_FOR", Value: rev(s3server.SecretKey) + "," + rev(s3server.AccessKey)},
		},
	}
	// A non-root program: the pod's fsGroup makes the work volume writable for it.
	restrictedPod(&job.Spec.Template.Spec, 65532, 65532, 65532)
	s.create(job)
	if got := s.waitReady(2 * time.Minute); got != "inspect" {
		t.Fatalf("ready from %q", got)
	}
	pods := s.podsOf("sim")
	if len(pods) != 1 {
		t.Fatalf("%d pods", len(pods))
	}
	pod := pods[0].Name
	for _, c := range pods[0].Spec.Containers {
		if len(c.EnvFrom) > 0 {
			t.Errorf("main container %s gets envFrom %+v", c.Name, c.EnvFrom)
		}
	}
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)
	prefix := s.ns + "/sim/" + pod + "/"
	objs := s.objects(prefix)
	if f := string(objs["out/findings.txt"].data); f != "none\n" {
		t.Errorf("the main container found credentials:\n%s", f)
	}
	var sums []string
	for name, data := range inputs {
		sums = append(sums, fmt.Sprintf("%x  %s", sha256.Sum256(data), name))
		if got := objs["inputs/"+name].data; !bytes.Equal(got, data) {
			t.Errorf("inputs/%s: staged out %d bytes, the dataset has %d", name, len(got), len(data))
		}
	}
	sortStrings(sums)
	if got, want := string(objs["out/inputs.sha256"].data), strings.Join(sums, "\n")+"\n"; got != want {
		t.Errorf("the main container saw inputs\n%s\nwant\n%s", got, want)
	}
	want := []string{"out/findings.txt", "out/inputs.sha256"}
	for name := range inputs {
		want = append(want, "inputs/"+name)
	}
	s.checkManifest(prefix, objs, want, v1.TriggerSucceeded)
	s.volumeReleased(run)
	s.cleanUp("sim")
}

var inspectOnce struct {
	sync.Mutex
	ref string
}

// inspectImage builds test/e2e/inspect as the only file of a FROM-scratch
// image and imports it into the cluster's containerd.
func inspectImage(t *testing.T, env *clusterenv.Env) string {
	t.Helper()
	inspectOnce.Lock()
	defer inspectOnce.Unlock()
	if inspectOnce.ref != "" {
		return inspectOnce.ref
	}
	const ref = "kdefer.io/e2e-inspect:v1"
	dir := t.TempDir()
	bin := program(t, "./test/e2e/inspect")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "inspect", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	lb := layer.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(lb)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = []string{"/inspect"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	tag, err := ggcr.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "inspect.tar")
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Cluster(context.Background(), "load-images", file); err != nil {
		t.Fatalf("import %s: %v: %s", ref, err, out)
	}
	inspectOnce.ref = ref
	return ref
}

// TestFailedRunRetainsVolume: a stage-out that cannot succeed (its bucket
// does not exist) fails the run; the default policy (onFailure Retain)
// keeps the work volume with the outputs until `kdefer release`
// (annotation kdefer.io/release on the DeferRun) lets it go.
func TestFailedRunRetainsVolume(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "retain")
	w := small
	w.mode = "exit 0"
	job := s.job("sim", w)
	job.Annotations[v1.AnnotationStageOut] = "s3://no-such-bucket-e2e/{namespace}/{pod}/" + s.s3Query()
	s.create(job)
	pod := s.waitReady(time.Minute)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunFailed, 3*time.Minute)
	s.logf("failed run: %s", steps(run))
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Retained" {
		t.Errorf("VolumeReleased condition %+v, want False/Retained", c)
	}
	s.pvcStaysGuarded(pod, time.Second)
	s.recordPVs()
	// The retained volume still holds every byte the pod wrote.
	s.retainedHoldsOutputs(pod, w)
	patch := []byte(`{"metadata":{"annotations":{"kdefer.io/release":"true"}}}`)
	if err := s.env.Client.Patch(s.ctx, run, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	s.volumeReleased(run)
	s.noFinalizer(pod)
	s.cleanUp("sim")
}

// retainedHoldsOutputs checks that pod's retained work volume (a local PV)
// still holds every file the workload w wrote.
func (s *scenario) retainedHoldsOutputs(pod string, w workload) {
	s.t.Helper()
	t := s.t
	pvc, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).Get(s.ctx, pod+"-kdefer-work", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := s.env.Clientset.CoreV1().PersistentVolumes().Get(s.ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.Local == nil {
		t.Fatalf("PV of %s: %v", pvc.Name, err)
	}
	for i := range w.files {
		got, err := os.ReadFile(filepath.Join(pv.Spec.Local.Path, "out", fmt.Sprintf("f%d.dat", i)))
		if err != nil || !bytes.Equal(got, fileContent(i, w.size)) {
			t.Errorf("retained out/f%d.dat: %d bytes, %v", i, len(got), err)
		}
	}
}
