//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/clusterenv"
	"github.com/kdefer/kdefer/test/s3server"
)

// bucket receives every scenario's outputs, under NAMESPACE/JOB/POD/.
const bucket = "e2e"

// s3Addr is the shared MinIO that run.sh starts on the node address.
func s3Addr() string {
	if a := os.Getenv("KDEFER_E2E_S3"); a != "" {
		return a
	}
	return clusterenv.NodeIP + ":9000"
}

var bucketOnce sync.Mutex

// scenario is one e2e test: its namespace, S3 server and signal server.
type scenario struct {
	t    *testing.T
	env  *clusterenv.Env
	ns   string
	node string // the node the namespace's pods run on; "" for any node
	s3   string // host:port of the MinIO the Job's stage steps use
	mc   *minio.Client
	sig  *signals
	ctx  context.Context
	pvs  map[string]string // claim -> PV, recorded while bound
	pvMu sync.Mutex
	// timerBound: see the option.
	timerBound bool
}

// scenarioOption changes what newScenario sets up.
type scenarioOption func(*scenario)

// withS3 has the scenario's Jobs stage to the S3 server at addr instead of
// the shared MinIO.
func withS3(addr string) scenarioOption { return func(s *scenario) { s.s3 = addr } }

// onNode keeps the scenario's pods on node instead of the first node
// (reserveNode gives a scenario a node of its own).
func onNode(node string) scenarioOption { return func(s *scenario) { s.node = node } }

// onAnyNode lets the scheduler put the scenario's pods on any node (the
// multi-node scenarios).
func onAnyNode() scenarioOption { return func(s *scenario) { s.node = "" } }

// timerBound marks a scenario that spends most of its time waiting on a
// timer (a run's deadline, the kubelet's or the Job controller's back-off):
// it does not wait for one of the first node's slots (firstNodeScenarios),
// so it starts with the first scenarios instead of ending the phase alone
// (w19, 2026-12-02: TestDeadlineThenRetry began 3.5 min into the
// side-by-side scenarios and ran its last 70 s with the machine 80% idle).
func timerBound() scenarioOption { return func(s *scenario) { s.timerBound = true } }

// newScenario sets up a namespace with the MinIO credentials Secret
// ("minio"), a signal server and the bucket on the shared MinIO (or the
// server of withS3). The namespace's pods run on the first node unless an
// option says otherwise: its node selector annotation pins them there, as
// every scenario but the multi-node ones is written for one node.
func newScenario(t *testing.T, prefix string, opts ...scenarioOption) *scenario {
	t.Helper()
	env := clusterenv.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	s := &scenario{t: t, env: env, node: env.NodeName, s3: s3Addr(), ctx: ctx, pvs: map[string]string{}}
	for _, o := range opts {
		o(s)
	}
	if s.node == env.NodeName && !s.timerBound {
		firstNodeScenarios <- struct{}{}
		t.Cleanup(func() { <-firstNodeScenarios })
	}
	conn, err := net.DialTimeout("tcp", s.s3, 3*time.Second)
	if err != nil {
		if os.Getenv("KDEFER_REQUIRE_TOOLS") == "1" {
			t.Fatalf("no MinIO at %s (test/e2e/run.sh starts one): %v", s.s3, err)
		}
		t.Skipf("no MinIO at %s (test/e2e/run.sh starts one): %v", s.s3, err)
	}
	conn.Close()
	s.mc = s3server.Client(t, s.s3)
	bucketOnce.Lock()
	ok, err := s.mc.BucketExists(ctx, bucket)
	if err == nil && !ok {
		err = s.mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"})
	}
	bucketOnce.Unlock()
	if err != nil {
		t.Fatalf("bucket %s on %s: %v", bucket, s.s3, err)
	}
	selector := ""
	if s.node != "" {
		selector = corev1.LabelHostname + "=" + s.node
	}
	// Every scenario runs where Pod Security "restricted" is enforced, so
	// each of its defer pods (and pre-pull pods) must meet it to run at
	// all; the Jobs' pods meet it too (restrictedPod).
	s.ns = env.LabelledNamespace(t, prefix, map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"},
		map[string]string{clusterenv.NodeSelectorAnnotation: selector})
	_, err = env.Clientset.CoreV1().Secrets(s.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "minio"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3server.AccessKey, "AWS_SECRET_ACCESS_KEY": s3server.SecretKey},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.sig = newSignals(t)
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpState()
			s.unstick()
		}
	})
	return s
}

// unstick, after a failure, deletes the namespace and, if kdefer does not
// let it go within 30 s, strips kdefer's finalizers so that the next tests
// start from a clean cluster (the failure is already recorded).
func (s *scenario) unstick() {
	ctx := context.Background()
	cs := s.env.Clientset
	// (A namespace already terminating answers 409: wait for it all the same.)
	if err := cs.CoreV1().Namespaces().Delete(ctx, s.ns, metav1.DeleteOptions{}); apierrors.IsNotFound(err) {
		return
	}
	if clusterenv.WaitFor(ctx, 30*time.Second, "namespace "+s.ns+" gone", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, s.ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}) == nil {
		return
	}
	s.t.Logf("namespace %s stuck: removing kdefer's finalizers", s.ns)
	strip := []byte(`{"metadata":{"finalizers":null}}`)
	if pods, err := cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			_, _ = cs.CoreV1().Pods(s.ns).Patch(ctx, p.Name, types.MergePatchType, strip, metav1.PatchOptions{})
		}
	}
	runs := &v1.DeferRunList{}
	if err := s.env.Client.List(ctx, runs, client.InNamespace(s.ns)); err == nil {
		for i := range runs.Items {
			_ = s.env.Client.Patch(ctx, &runs.Items[i], client.RawPatch(types.MergePatchType, strip))
		}
	}
}

func (s *scenario) logf(format string, args ...any) {
	s.t.Helper()
	s.t.Logf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// dumpState logs the namespace's objects and kdefer's log on failure.
func (s *scenario) dumpState() {
	for _, args := range [][]string{
		{"get", "jobs,pods,pvc,pdb,deferruns", "-o", "wide", "-n", s.ns},
		{"get", "deferruns", "-n", s.ns, "-o", "yaml"},
		{"get", "events", "-n", s.ns, "--sort-by=.lastTimestamp"},
		{"logs", "-n", "kdefer-system", "deploy/kdefer-controller", "--tail=60"},
	} {
		out, _ := kubectl(context.Background(), args...)
		s.t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
}

// kubectl runs the cluster's kubectl (KDEFER_KUBECTL, else kubectl) with its kubeconfig.
func kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, kubectlBin(), append([]string{"--kubeconfig", clusterenv.Dir() + "/kubeconfig"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func kubectlBin() string {
	if bin := os.Getenv("KDEFER_KUBECTL"); bin != "" {
		return bin
	}
	return "kubectl"
}

var minioStat = minio.StatObjectOptions{}

// ---- what the pods run ----------------------------------------------------

// workload describes a main container's script: it writes files
// out/f0.dat.. out/f{n-1}.dat of size bytes each (line "kdefer-e2e file I"
// repeated) and out/SHA256SUMS, signals "ready", then ends per mode.
type workload struct {
	files, size int
	mode        string // "exit N", "wait N" (wait for the go signal, then exit N), "hold" (until killed), "oom", "fill", "pressure KEEP SCRATCH"
}

func fileContent(i, size int) []byte {
	line := fmt.Sprintf("kdefer-e2e file %d\n", i)
	return bytes.Repeat([]byte(line), size/len(line)+1)[:size]
}

func (w workload) script(sig string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `trap 'exit 143' TERM
set -e
mkdir -p /kdefer/out
i=0
while [ $i -lt %d ]; do yes "kdefer-e2e file $i" | head -c %d > /kdefer/out/f$i.dat; i=$((i+1)); done
cd /kdefer/out && sha256sum f*.dat > SHA256SUMS && cd /
timeout 30 wget -q -O /dev/null %s/ready/$HOSTNAME
`, w.files, w.size, sig)
	f := strings.Fields(w.mode)
	switch f[0] {
	case "exit":
		fmt.Fprintf(&b, "exit %s\n", f[1])
	case "wait":
		fmt.Fprintf(&b, "timeout 600 wget -q -O /dev/null %s/go/$HOSTNAME & wait $!\nexit %s\n", sig, f[1])
	case "hold":
		b.WriteString("while :; do sleep 3600 & wait $!; done\n")
	case "oom": // the main process itself exceeds the memory limit
		// A string doubled by the shell itself, so the pages are touched
		// from user space and the memory cgroup's OOM killer always fires.
		// dd reading /dev/zero into a 256M buffer touched them inside
		// read(2), where a charge over the limit can end the read short
		// instead: dd then wrote what it got and exited 0, and the pod
		// Succeeded (seen once, in a cold CI run on a loaded machine).
		b.WriteString("x=kdefer; while :; do x=$x$x; done\n")
	case "fill": // the container's writable layer exceeds its ephemeral-storage limit
		b.WriteString("dd if=/dev/zero of=/tmp/fill bs=1M count=24\nwhile :; do sleep 3600 & wait $!; done\n")
	case "pressure": // the node's file system (TestDiskPressure), then held until killed
		// fallocate takes the blocks without writing them: instant, and
		// the host pays nothing for the loop-mounted image's sparse file.
		fmt.Fprintf(&b, `avail=$(df -Pk /kdefer | awk 'NR==2 {print $4}')
echo "node file system: $avail KiB available; leaving %[1]s KiB in the work volume, then %[2]s KiB in /scratch"
fallocate -l $(((avail - %[1]s) * 1024)) /kdefer/fill.bin
fallocate -l $((%[2]s * 1024)) /scratch/fill.bin
echo "node file system: $(df -Pk /kdefer | awk 'NR==2 {print $4}') KiB available"
while :; do sleep 3600 & wait $!; done
`, f[1], f[2])
	default:
		panic("workload mode " + w.mode)
	}
	return b.String()
}

// Jobs of the scenarios run as this user and group, not root: their
// namespaces enforce Pod Security "restricted".
const jobUser int64 = 1000

// restrictedPod makes a Job's pod meet Pod Security "restricted" as uid:gid;
// the pod's fsGroup lets it write the work volume (a local PV, which the
// kubelet gives to that group).
func restrictedPod(spec *corev1.PodSpec, uid, gid, fsGroup int64) {
	spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(gid), FSGroup: ptr.To(fsGroup),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	for i := range spec.Containers {
		spec.Containers[i].SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
}

// job builds an opted-in Job running w, staging out to the scenario's bucket.
func (s *scenario) job(name string, w workload) *batchv1.Job {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: s.ns,
			Labels: map[string]string{v1.LabelEnabled: "true"},
			Annotations: map[string]string{
				v1.AnnotationStageOut:    s.stageOutURL(),
				v1.AnnotationCredentials: "minio",
			},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template:     corev1.PodTemplateSpec{Spec: s.podSpec("main", w.script(s.sig.url))},
		},
	}
	return job
}

// podSpec is the spec of every scenario's workload pod: one busybox
// container named container running script, meeting Pod Security
// "restricted" as jobUser.
func (s *scenario) podSpec(container, script string) corev1.PodSpec {
	spec := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](10),
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		Containers: []corev1.Container{{
			Name: container, Image: clusterenv.MustImage(s.t, "busybox"), ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sh", "-c", script},
		}},
	}
	restrictedPod(&spec, jobUser, jobUser, jobUser)
	return spec
}

func (s *scenario) s3Query() string {
	return "?endpoint=http://" + s.s3 + "&use_path_style=true&region=us-east-1"
}

func (s *scenario) stageOutURL() string {
	return "s3://" + bucket + "/{namespace}/{job}/{pod}/" + s.s3Query()
}

func (s *scenario) create(obj client.Object) {
	s.t.Helper()
	if err := s.env.Client.Create(s.ctx, obj); err != nil {
		s.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// ---- signals between pods and the test ------------------------------------

// signals is an HTTP server on the node address: pods GET /ready/POD when
// their outputs are written and GET /go/POD to wait for the test's release;
// defer containers POST results to /result, and GET /count/KEY for how
// often KEY was asked, this time included (state a restarted container
// keeps).
type signals struct {
	url     string
	ready   chan string
	results chan string
	mu      sync.Mutex
	gos     map[string]chan struct{}
	counts  map[string]int
	done    chan struct{}
}

func newSignals(t *testing.T) *signals {
	s := &signals{ready: make(chan string, 64), results: make(chan string, 64), gos: map[string]chan struct{}{}, counts: map[string]int{}, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/ready/{pod}", func(w http.ResponseWriter, r *http.Request) {
		s.ready <- r.PathValue("pod")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/go/{pod}", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.goChan(r.PathValue("pod")):
			fmt.Fprintln(w, "go")
		case <-s.done:
			http.Error(w, "test over", http.StatusServiceUnavailable)
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/count/{key}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.counts[r.PathValue("key")]++
		n := s.counts[r.PathValue("key")]
		s.mu.Unlock()
		fmt.Fprintln(w, n)
	})
	mux.HandleFunc("/result", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		s.results <- string(b)
		fmt.Fprintln(w, "ok")
	})
	s.url = clusterenv.ServeOnNode(t, mux)
	t.Cleanup(func() { close(s.done) })
	return s
}

func (s *signals) goChan(pod string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.gos[pod]
	if !ok {
		c = make(chan struct{})
		s.gos[pod] = c
	}
	return c
}

// release lets pod's "wait" end.
func (s *signals) release(pod string) {
	c := s.goChan(pod)
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

// drainReady drops the ready signals received so far.
func (s *signals) drainReady() {
	for {
		select {
		case <-s.ready:
		default:
			return
		}
	}
}

// waitReady returns the next pod that signalled ready.
func (sc *scenario) waitReady(timeout time.Duration) string {
	sc.t.Helper()
	select {
	case p := <-sc.sig.ready:
		sc.logf("pod %s wrote its outputs", p)
		return p
	case <-time.After(timeout):
		sc.t.Fatalf("no pod signalled ready within %s (outputs written)", timeout)
	}
	return ""
}

func (sc *scenario) waitResult(timeout time.Duration) string {
	sc.t.Helper()
	select {
	case r := <-sc.sig.results:
		return r
	case <-time.After(timeout):
		sc.t.Fatalf("no result posted within %s", timeout)
	}
	return ""
}

// ---- waiting on kdefer ------------------------------------------------------

func (s *scenario) run(pod string) *v1.DeferRun {
	run := &v1.DeferRun{}
	if err := s.env.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, run); err != nil {
		return nil
	}
	return run
}

// waitRun waits until the pod's DeferRun satisfies cond.
func (s *scenario) waitRun(pod string, timeout time.Duration, what string, cond func(*v1.DeferRun) bool) *v1.DeferRun {
	s.t.Helper()
	var last *v1.DeferRun
	err := clusterenv.WaitFor(s.ctx, timeout, "DeferRun "+s.ns+"/"+pod+" "+what, func(ctx context.Context) (bool, error) {
		run := &v1.DeferRun{}
		if err := s.env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, run); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		last = run
		return cond(run), nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w (last: trigger %q state %q conditions %s steps %s)", err, last.Status.Trigger, last.Status.State, runConds(last), steps(last))
		}
		s.t.Fatal(err)
	}
	return last
}

func steps(r *v1.DeferRun) string {
	var b []string
	for _, st := range r.Status.Steps {
		code := "-"
		if st.ExitCode != nil {
			code = fmt.Sprint(*st.ExitCode)
		}
		b = append(b, fmt.Sprintf("%s: %d attempts, exit %s, %q", st.Name, st.Attempts, code, st.Message))
	}
	return "[" + strings.Join(b, "; ") + "]"
}

func runConds(r *v1.DeferRun) string {
	var b []string
	for _, c := range r.Status.Conditions {
		b = append(b, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return strings.Join(b, ",")
}

func finished(r *v1.DeferRun) bool {
	switch r.Status.State {
	case v1.DeferRunSucceeded, v1.DeferRunFailed, v1.DeferRunSkipped:
		return true
	}
	return false
}

// waitFinished waits for the run's end and checks its trigger and state.
func (s *scenario) waitFinished(pod string, trigger v1.Trigger, state string, timeout time.Duration) *v1.DeferRun {
	s.t.Helper()
	run := s.waitRun(pod, timeout, "to finish", finished)
	s.logf("DeferRun %s: trigger %s state %s (%s)", pod, run.Status.Trigger, run.Status.State, runConds(run))
	if run.Status.Trigger != trigger {
		s.t.Errorf("DeferRun %s: trigger %q, want %q", pod, run.Status.Trigger, trigger)
	}
	if run.Status.State != state {
		s.t.Errorf("DeferRun %s: state %q, want %q (conditions %s, steps %s)", pod, run.Status.State, state, runConds(run), steps(run))
	}
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunTriggered)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(trigger) {
		s.t.Errorf("DeferRun %s: Triggered condition %+v, want True/%s", pod, c, trigger)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, state); c == nil || c.Status != metav1.ConditionTrue {
		s.t.Errorf("DeferRun %s: condition %s %+v, want True", pod, state, c)
	}
	return run
}

// diskFreedWithin bounds how long after the release the defer pod and the
// work PVC may take to go: the README promises the disk is freed "as soon as
// the stage-out succeeded". The release deletes the PVC in the foreground;
// the garbage collector deletes the defer pod (a blocking dependent) within
// milliseconds, the kubelet sees that through its watch and confirms a
// terminated pod's deletion within seconds, and pvc-protection then lets the
// PVC go. 30 s leaves
// room for a kubelet that was just restarted (Ready again in ~10 s) and for
// a loaded 2-core machine; a pod still there after it is held by something
// (as the non-blocking owner reference once held it, until the Job went).
const diskFreedWithin = 30 * time.Second

// volumeReleased checks that the run released its work volume and that its
// disk is freed at once: the defer pod goes with it, and the PVC is gone
// unless the Job's own pod still exists (a generic ephemeral volume lives as
// long as its pod; the PVC then stays Terminating until the pod is deleted).
func (s *scenario) volumeReleased(run *v1.DeferRun) {
	s.t.Helper()
	run = s.waitRun(run.Name, time.Minute, "to release its volume", func(r *v1.DeferRun) bool {
		return meta.IsStatusConditionTrue(r.Status.Conditions, v1.DeferRunVolumeReleased)
	})
	if dp := run.Status.DeferPodName; dp != "" {
		if err := s.env.WaitPodGone(s.ctx, s.ns, dp, diskFreedWithin); err != nil {
			s.t.Errorf("defer pod of a released volume: %v", err)
		} else if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased); c != nil {
			// The evidence for issue #18's late defer pods: how long each
			// one outlived its release (the condition's time has 1 s steps).
			s.logf("defer pod %s gone %s after the volume was released", dp, time.Since(c.LastTransitionTime.Time).Round(100*time.Millisecond))
		}
	}
	for _, v := range run.Spec.Volumes {
		var state string
		err := clusterenv.WaitFor(s.ctx, diskFreedWithin, "work PVC "+v.ClaimName+" deleted", func(ctx context.Context) (bool, error) {
			pvc, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).Get(ctx, v.ClaimName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			if err != nil || pvc.DeletionTimestamp == nil {
				state = "not deleted"
				return false, err
			}
			pod, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(ctx, run.Spec.PodName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && pod.DeletionTimestamp != nil) {
				state = "Terminating, though its pod is gone"
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			s.t.Errorf("%v (%s)", err, state)
		}
	}
}

// recordPVs remembers which PV each work PVC of the namespace is bound to.
func (s *scenario) recordPVs() {
	pvcs, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	s.pvMu.Lock()
	defer s.pvMu.Unlock()
	for _, p := range pvcs.Items {
		if p.Spec.VolumeName != "" {
			s.pvs[p.Name] = p.Spec.VolumeName
		}
	}
}

// podGone waits until the pod has been deleted (its finalizer removed).
func (s *scenario) podGone(pod string, timeout time.Duration) { //nolint:unparam // each scenario states how long it allows
	s.t.Helper()
	if err := s.env.WaitPodGone(s.ctx, s.ns, pod, timeout); err != nil {
		s.t.Fatal(err)
	}
}

// noFinalizer waits until kdefer's finalizer is off the pod (or the pod is gone).
func (s *scenario) noFinalizer(pod string) {
	s.t.Helper()
	err := clusterenv.WaitFor(s.ctx, time.Minute, "kdefer's finalizer off pod "+pod, func(ctx context.Context) (bool, error) {
		p, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		for _, f := range p.Finalizers {
			if f == v1.PodFinalizer {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// cleanUp deletes the Job (if still there) with background propagation and
// checks nothing of the scenario is left: no pod, PVC, DeferRun or PDB in
// the namespace, and no PV still bound to one of its claims.
func (s *scenario) cleanUp(jobs ...string) {
	s.t.Helper()
	s.recordPVs()
	for _, j := range jobs {
		err := s.env.Clientset.BatchV1().Jobs(s.ns).Delete(s.ctx, j, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			s.t.Fatalf("delete job %s: %v", j, err)
		}
	}
	s.noLeaks(2 * time.Minute)
}

func (s *scenario) noLeaks(timeout time.Duration) {
	s.t.Helper()
	var left string
	err := clusterenv.WaitFor(s.ctx, timeout, "every pod, PVC, PDB and DeferRun of "+s.ns+" to be gone", func(ctx context.Context) (bool, error) {
		var names []string
		pods, err := s.env.Clientset.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			names = append(names, "pod/"+p.Name)
		}
		pvcs, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pvcs.Items {
			names = append(names, "pvc/"+p.Name)
		}
		pdbs, err := s.env.Clientset.PolicyV1().PodDisruptionBudgets(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pdbs.Items {
			names = append(names, "pdb/"+p.Name)
		}
		runs := &v1.DeferRunList{}
		if err := s.env.Client.List(ctx, runs, client.InNamespace(s.ns)); err != nil {
			return false, err
		}
		for _, r := range runs.Items {
			names = append(names, "deferrun/"+r.Name)
		}
		left = strings.Join(names, " ")
		return len(names) == 0, nil
	})
	if err != nil {
		s.t.Fatalf("%v; left: %s", err, left)
	}
	s.waitPVsUnbound(time.Minute)
	recyclePVs(s.t, s.env)
}

// waitPVsUnbound waits until no PV recorded for the scenario is bound to its
// claim, and reports each that stays bound. The PV controller marks a PV
// Released a moment after its claim is gone; it may then be Available
// again already, or bound to another claim: every scenario's cleanUp wipes
// every Released PV of the cluster (recyclePVs), and one running beside
// this one may have been first (w37: TestDiskPressure waited a minute for
// "Released" while its PV had been wiped).
func (s *scenario) waitPVsUnbound(timeout time.Duration) bool {
	s.t.Helper()
	s.pvMu.Lock()
	pvs := maps.Clone(s.pvs)
	s.pvMu.Unlock()
	ok := true
	for claim, pv := range pvs {
		err := clusterenv.WaitFor(s.ctx, timeout, "PV "+pv+" no longer Bound to "+s.ns+"/"+claim, func(ctx context.Context) (bool, error) {
			p, err := s.env.Clientset.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			bound := p.Status.Phase == corev1.VolumeBound && p.Spec.ClaimRef != nil && p.Spec.ClaimRef.Namespace == s.ns && p.Spec.ClaimRef.Name == claim
			return !bound, nil
		})
		if err != nil {
			s.t.Error(err)
			ok = false
		}
	}
	return ok
}

var recycleMu sync.Mutex

func recyclePVs(t *testing.T, env *clusterenv.Env) {
	recycleMu.Lock()
	defer recycleMu.Unlock()
	if _, err := env.RecycleReleasedPVs(context.Background()); err != nil {
		t.Logf("recycle PVs: %v", err) // a concurrent recycle; the next one gets it
	}
}

// ---- what must be in the bucket --------------------------------------------

type object struct {
	info minio.ObjectInfo
	data []byte
}

func (s *scenario) objects(prefix string) map[string]object {
	s.t.Helper()
	out := map[string]object{}
	for o := range s.mc.ListObjects(s.ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			s.t.Fatalf("list s3://%s/%s: %v", bucket, prefix, o.Err)
		}
		r, err := s.mc.GetObject(s.ctx, bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			s.t.Fatalf("get %s: %v", o.Key, err)
		}
		out[strings.TrimPrefix(o.Key, prefix)] = object{o, data}
	}
	return out
}

// checkOutputs checks that everything the pod wrote is in the bucket under
// NAMESPACE/JOB/POD/: every byte of out/f*.dat, SHA256SUMS as the pod
// computed it, and the manifest, listing exactly those objects, written
// last, with the trigger. extra are other keys expected (e.g. inputs).
func (s *scenario) checkOutputs(job, pod string, w workload, trigger v1.Trigger, extra ...string) map[string]object {
	s.t.Helper()
	prefix := s.ns + "/" + job + "/" + pod + "/"
	objs := s.objects(prefix)
	want := map[string]bool{"out/SHA256SUMS": true, stagecontract.ManifestKey: true}
	for _, e := range extra {
		want[e] = true
	}
	sums := map[string]string{}
	for i := range w.files {
		key := fmt.Sprintf("out/f%d.dat", i)
		want[key] = true
		o, ok := objs[key]
		if !ok {
			continue
		}
		if exp := fileContent(i, w.size); !bytes.Equal(o.data, exp) {
			s.t.Errorf("%s: %d bytes differ from the %d the pod wrote", key, len(o.data), len(exp))
		}
		h := sha256.Sum256(o.data)
		sums[fmt.Sprintf("f%d.dat", i)] = hex.EncodeToString(h[:])
	}
	var missing, unexpected []string
	for k := range want {
		if _, ok := objs[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range objs {
		if !want[k] && !strings.HasPrefix(k, stagecontract.LogsDir) { // logs: checkManifest
			unexpected = append(unexpected, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(unexpected)
	if len(missing) > 0 || len(unexpected) > 0 {
		s.t.Fatalf("s3://%s/%s: missing %v, unexpected %v", bucket, prefix, missing, unexpected)
	}
	// The pod's own checksums match the stored bytes.
	for _, line := range strings.Split(strings.TrimSpace(string(objs["out/SHA256SUMS"].data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || sums[f[1]] != f[0] {
			s.t.Errorf("SHA256SUMS line %q does not match the stored object (sha256 %s)", line, sums[f[1]])
		}
	}
	if n := len(strings.Split(strings.TrimSpace(string(objs["out/SHA256SUMS"].data)), "\n")); n != w.files {
		s.t.Errorf("SHA256SUMS has %d lines, want %d", n, w.files)
	}
	s.checkManifest(prefix, objs, nil, trigger)
	return objs
}

// checkManifest checks the manifest among objs: it lists exactly the other
// objects with their sizes, has the trigger and was written last. want, if
// not nil, are the keys expected besides it.
func (s *scenario) checkManifest(prefix string, objs map[string]object, want []string, trigger v1.Trigger) {
	s.t.Helper()
	if want != nil {
		have := map[string]bool{}
		for k := range objs {
			have[k] = true
		}
		for _, k := range append(want, stagecontract.ManifestKey) {
			if !have[k] {
				s.t.Errorf("s3://%s/%s%s missing", bucket, prefix, k)
			}
			delete(have, k)
		}
		for k := range have {
			if !strings.HasPrefix(k, stagecontract.LogsDir) { // checked below
				s.t.Errorf("s3://%s/%s%s unexpected", bucket, prefix, k)
			}
		}
	}
	mo, ok := objs[stagecontract.ManifestKey]
	if !ok {
		s.t.Fatalf("no manifest at s3://%s/%s%s", bucket, prefix, stagecontract.ManifestKey)
	}
	m, err := storage.ParseManifest(mo.data)
	if err != nil {
		s.t.Fatalf("manifest: %v", err)
	}
	if m.Trigger != string(trigger) {
		s.t.Errorf("manifest trigger %q, want %q", m.Trigger, trigger)
	}
	listed := map[string]int64{}
	for _, f := range m.Files {
		listed[f.Key] = f.Size
	}
	// The ended pod's logs (stageOut.logs, on by default): listed apart
	// from the outputs, under _kdefer/logs/POD/; each log the step could
	// not archive is a warning naming the container and why (a
	// kubelet-evicted pod's containers, and their logs, are usually
	// removed before its defer pod asks). A pod with neither is a bug.
	if len(m.Logs) == 0 && len(m.LogWarnings) == 0 {
		s.t.Errorf("manifest lists no logs of pod %s and no warning saying why", m.Identity["pod"])
	}
	for _, w := range m.LogWarnings {
		if w.Pod != m.Identity["pod"] || w.Reason == "" {
			s.t.Errorf("manifest log warning %+v: want pod %s and a reason", w, m.Identity["pod"])
		}
		s.logf("log of %s container %q not archived: %s", w.Pod, w.Container, w.Reason)
	}
	// The ended pod's under _kdefer/logs/POD/, the stage step's own under
	// _kdefer/logs/POD-defer/.
	deferPod := m.Identity["pod"] + "-defer"
	selfLog := stagecontract.LogKey(deferPod, stagecontract.LogRef{Container: v1.StageOutStepName})
	for _, l := range m.Logs {
		if !strings.HasPrefix(l.Key, stagecontract.LogsDir+m.Identity["pod"]+"/") && l.Key != selfLog {
			s.t.Errorf("manifest lists log %s, not under %s%s/ nor the stage step's %s", l.Key, stagecontract.LogsDir, m.Identity["pod"], selfLog)
		}
		listed[l.Key] = l.Size
	}
	if _, ok := listed[selfLog]; !ok {
		s.t.Errorf("manifest does not list the stage step's own log %s", selfLog)
	}
	// With defer containers, the stage-logs sidecar archives theirs after
	// the manifest and lists them last, in the steps' list.
	afterManifest := map[string]bool{}
	if sl := s.stepLogs(objs, deferPod); sl != nil {
		lo := objs[stagecontract.StepLogsKey(deferPod)]
		afterManifest[stagecontract.StepLogsKey(deferPod)] = true
		listed[stagecontract.StepLogsKey(deferPod)] = int64(len(lo.data))
		for _, l := range sl.Logs {
			afterManifest[l.Key] = true
			listed[l.Key] = l.Size
			if o, ok := objs[l.Key]; ok && o.info.LastModified.After(lo.info.LastModified) {
				s.t.Errorf("%s written after the steps' list that names it", l.Key)
			}
		}
	}
	for k, o := range objs {
		if k == stagecontract.ManifestKey {
			continue
		}
		if size, ok := listed[k]; !ok || size != int64(len(o.data)) {
			s.t.Errorf("manifest lists %s with size %d (listed %v), object has %d", k, size, ok, len(o.data))
		}
		if !afterManifest[k] && o.info.LastModified.After(mo.info.LastModified) {
			s.t.Errorf("%s (modified %s) written after the manifest (%s)", k, o.info.LastModified.Format(time.StampMilli), mo.info.LastModified.Format(time.StampMilli))
		}
	}
	if len(listed) != len(objs)-1 {
		s.t.Errorf("manifest lists %d files and logs, the prefix holds %d objects besides it", len(listed), len(objs)-1)
	}
	s.logf("s3://%s/%s: %d objects (%d logs, %d log warnings), every byte and checksum right, manifest last", bucket, prefix, len(objs), len(m.Logs), len(m.LogWarnings))
}

// stepLogs is the stage-logs sidecar's list of deferPod's defer
// containers' logs among objs, nil when there is none.
func (s *scenario) stepLogs(objs map[string]object, deferPod string) *stagecontract.StepLogs {
	s.t.Helper()
	o, ok := objs[stagecontract.StepLogsKey(deferPod)]
	if !ok {
		return nil
	}
	var l stagecontract.StepLogs
	if err := json.Unmarshal(o.data, &l); err != nil {
		s.t.Fatalf("%s: %v", stagecontract.StepLogsKey(deferPod), err)
	}
	return &l
}

// logOrWarning checks that the manifest among objs archived the log of
// pod's container, or names it in a warning with the reason; it returns
// the warning's reason ("" when the log is there).
func (s *scenario) logOrWarning(objs map[string]object, pod, container string) string {
	s.t.Helper()
	m, err := storage.ParseManifest(objs[stagecontract.ManifestKey].data)
	if err != nil {
		s.t.Fatalf("manifest: %v", err)
	}
	key := stagecontract.LogKey(pod, stagecontract.LogRef{Container: container})
	for _, l := range m.Logs {
		if l.Key == key {
			return ""
		}
	}
	for _, w := range m.LogWarnings {
		if w.Pod == pod && w.Container == container && !w.Previous && w.Reason != "" {
			return w.Reason
		}
	}
	s.t.Errorf("manifest neither lists %s nor warns why it is missing (logs %+v, warnings %+v)", key, m.Logs, m.LogWarnings)
	return ""
}

func sortStrings(s []string) { sort.Strings(s) }

// noOutputs checks that nothing was uploaded for the pod.
func (s *scenario) noOutputs(job, pod string) {
	s.t.Helper()
	if objs := s.objects(s.ns + "/" + job + "/" + pod + "/"); len(objs) > 0 {
		var keys []string
		for k := range objs {
			keys = append(keys, k)
		}
		s.t.Errorf("expected no upload for %s, found %v", pod, keys)
	}
}

// ---- small helpers ----------------------------------------------------------

func (s *scenario) podsOf(job string) []corev1.Pod {
	pods, err := s.env.Clientset.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		s.t.Fatal(err)
	}
	return pods.Items
}

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }
