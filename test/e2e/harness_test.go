//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
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
	// logsLost, when set, says why the ended pods' logs may be missing
	// (logsMayBeLost); otherwise checkManifest fails on any warning about
	// them.
	logsLost string
}

// scenarioOption changes what newScenario sets up.
type scenarioOption func(*scenario)

// withS3 has the scenario's Jobs stage to the S3 server at addr instead of
// the shared MinIO.
func withS3(addr string) scenarioOption { return func(s *scenario) { s.s3 = addr } }

// logsMayBeLost lets the scenario's ended pods' logs be missing, with the
// reason (e.g. the node and its disk are gone): checkManifest then accepts a
// log warning whose reason contains because, and nothing else.
func logsMayBeLost(because string) scenarioOption {
	return func(s *scenario) { s.logsLost = because }
}

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

// ---- small helpers ----------------------------------------------------------

func (s *scenario) podsOf(job string) []corev1.Pod {
	pods, err := s.env.Clientset.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		s.t.Fatal(err)
	}
	return pods.Items
}

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }
