// Package clusterenv gives e2e tests the local single-node cluster started by
// test/cluster/cluster.sh: clients, the node's address (where pods and the
// apiserver reach servers run by the test), image names, bounded waits,
// PV recycling and component-log dumps.
//
// Without a running cluster, Require skips the test, unless
// KDEFER_REQUIRE_TOOLS=1, which makes that a failure.
package clusterenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kdefer/kdefer/test/repo"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdeferscheme "github.com/kdefer/kdefer/api/scheme"
)

const (
	// NodeIP is the node's address: the gateway of the pod bridge. Pods and
	// the apiserver reach servers that a test runs on the host here (e.g. a
	// webhook at https://10.88.0.1:PORT, or MinIO at http://10.88.0.1:9000).
	NodeIP = "10.88.0.1"
	// APIServer is the apiserver's URL (loopback only).
	APIServer = "https://127.0.0.1:6443"
	// StorageClass is the class of the cluster's pre-created local PVs
	// (no-provisioner, WaitForFirstConsumer, Retain).
	StorageClass = "kdefer-local"
	// LocalPVLabel selects the pre-created PVs (value "true").
	LocalPVLabel = "kdefer.io/local-pv"
	// NodeSelectorAnnotation on a namespace is the node label selector the
	// apiserver's PodNodeSelector admission plugin gives its pods (empty:
	// any node); a namespace without it gets the cluster's default
	// (KDEFER_CLUSTER_DEFAULT_NODE_SELECTOR of cluster.sh up).
	NodeSelectorAnnotation = "scheduler.alpha.kubernetes.io/node-selector"
)

// Env is the running local cluster.
type Env struct {
	Dir        string // state directory (KDEFER_CLUSTER_DIR)
	Kubeconfig string // admin kubeconfig
	NodeName   string
	Config     *rest.Config
	Clientset  kubernetes.Interface
	Client     client.Client // controller-runtime client with kdefer's types
	Scheme     *runtime.Scheme
}

// Dir is the cluster's state directory: KDEFER_CLUSTER_DIR or bin/cluster.
func Dir() string {
	if d := os.Getenv("KDEFER_CLUSTER_DIR"); d != "" {
		return d
	}
	return filepath.Join(repo.MustRoot(), "bin", "cluster")
}

// Script is the path of cluster.sh.
func Script() string { return filepath.Join(repo.MustRoot(), "test", "cluster", "cluster.sh") }

// Load connects to the running cluster; it fails when the apiserver does not
// answer /readyz within a few seconds or the node is not Ready.
func Load(ctx context.Context) (*Env, error) {
	dir := Dir()
	kc := filepath.Join(dir, "kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		return nil, fmt.Errorf("no cluster kubeconfig at %s (start one with 'make cluster-up')", kc)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return nil, fmt.Errorf("cluster apiserver at %s not ready: %w", cfg.Host, err)
	}
	node := os.Getenv("KDEFER_NODE_NAME")
	if node == "" {
		node = "kdefer-node"
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("cluster node %s: %w", node, err)
	}
	if !nodeReady(n) {
		return nil, fmt.Errorf("cluster node %s is not Ready", node)
	}
	scheme := kdeferscheme.New()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &Env{Dir: dir, Kubeconfig: kc, NodeName: node, Config: cfg, Clientset: cs, Client: c, Scheme: scheme}, nil
}

// Require returns the running cluster, skipping the test when there is none
// (a failure under KDEFER_REQUIRE_TOOLS=1). A failing test gets the tail of
// every component's log.
func Require(t testing.TB) *Env {
	t.Helper()
	env, err := Load(context.Background())
	if err != nil {
		if os.Getenv("KDEFER_REQUIRE_TOOLS") == "1" {
			t.Fatalf("local cluster required (KDEFER_REQUIRE_TOOLS=1): %v", err)
		}
		t.Skipf("no local cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			env.DumpLogs(t, 40)
		}
	})
	return env
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Image is the reference of an image built by test/images and imported into
// the cluster: "pause", "busybox", "kdefer-stage", "kdefer-controller".
func Image(name string) (string, error) {
	dir := os.Getenv("KDEFER_IMAGES_DIR")
	if dir == "" {
		dir = filepath.Join(repo.MustRoot(), "bin", "images")
	}
	b, err := os.ReadFile(filepath.Join(dir, name+".ref"))
	if err != nil {
		return "", fmt.Errorf("image %s not built (make images): %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// MustImage is Image that fails the test.
func MustImage(t testing.TB, name string) string {
	t.Helper()
	ref, err := Image(name)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// Namespace creates a namespace for the test and deletes it (waiting, bounded)
// when the test ends.
func (e *Env) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	return e.LabelledNamespace(t, prefix, nil, nil)
}

// LabelledNamespace is Namespace with labels, e.g. Pod Security's
// pod-security.kubernetes.io/enforce, and annotations, e.g. the node
// selector of its pods (NodeSelectorAnnotation).
func (e *Env) LabelledNamespace(t testing.TB, prefix string, labels, annotations map[string]string) string {
	t.Helper()
	ctx := context.Background()
	ns, err := e.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels, Annotations: annotations},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	name := ns.Name
	// Pods need the namespace's default ServiceAccount, and their token volume the root CA ConfigMap.
	if err := WaitFor(ctx, 30*time.Second, "ServiceAccount "+name+"/default and ConfigMap kube-root-ca.crt", func(ctx context.Context) (bool, error) {
		if _, err := e.Clientset.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		_, err := e.Clientset.CoreV1().ConfigMaps(name).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := e.Clientset.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", name, err)
			return
		}
		if err := WaitFor(ctx, 2*time.Minute, "namespace "+name+" to be deleted", func(ctx context.Context) (bool, error) {
			_, err := e.Clientset.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}); err != nil {
			t.Error(err)
		}
	})
	return name
}

// ServeOnNode serves h over plain HTTP on the node address (a random port)
// until the test ends, and returns the base URL ("http://10.88.0.1:PORT"):
// pods reach it, e.g. a defer container posting a result with busybox wget.
func ServeOnNode(t testing.TB, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(NodeIP, "0"))
	if err != nil {
		t.Fatalf("listen on the node address %s (is the cluster up?): %v", NodeIP, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	// Serve returns http.ErrServerClosed once the cleanup closes it; an
	// earlier failure shows as the cluster's failing calls to h.
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

// WaitFor polls cond every 200 ms until it returns true, an error that is not
// nil, or timeout; the error names what was awaited and the last state.
// cond may return (false, nil) to keep waiting.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for {
		ok, err := cond(ctx)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s waiting for %s", time.Since(start).Round(time.Millisecond), what)
		case <-tick.C:
		}
	}
}

// WaitPodGone waits until the pod no longer exists.
func (e *Env) WaitPodGone(ctx context.Context, ns, name string, timeout time.Duration) error {
	return WaitFor(ctx, timeout, "pod "+ns+"/"+name+" to be gone", func(ctx context.Context) (bool, error) {
		_, err := e.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// WaitPod waits until cond holds for the pod; the timeout error includes the pod's last phase and conditions.
func (e *Env) WaitPod(ctx context.Context, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var last *corev1.Pod
	err := WaitFor(ctx, timeout, "pod "+ns+"/"+name+" "+what, func(ctx context.Context) (bool, error) {
		p, err := e.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		last = p
		return cond(p), nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (last: phase %s, conditions %s)", err, last.Status.Phase, conditions(last))
	}
	return last, err
}

func conditions(p *corev1.Pod) string {
	var s []string
	for _, c := range p.Status.Conditions {
		s = append(s, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return strings.Join(s, ",")
}

// Evict asks the Eviction API to evict the pod (as `kubectl drain` does).
func (e *Env) Evict(ctx context.Context, ns, name string) error {
	return e.Clientset.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
	})
}

// PodLogs returns a container's log through the apiserver and kubelet.
func (e *Env) PodLogs(ctx context.Context, ns, pod, container string) (string, error) {
	b, err := e.Clientset.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	return string(b), err
}

// RecycleReleasedPVs empties the directory of every Released pre-created PV
// (every node's and the shared ones: all under the cluster's state
// directory) and removes its claimRef, so it is Available again. It returns
// how many it recycled. Call it after a test has checked what it wanted from them.
func (e *Env) RecycleReleasedPVs(ctx context.Context) (int, error) {
	pvs, err := e.Clientset.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: LocalPVLabel + "=true"})
	if err != nil {
		return 0, err
	}
	root := filepath.Clean(e.Dir) + string(filepath.Separator)
	n := 0
	for _, pv := range pvs.Items {
		if pv.Status.Phase != corev1.VolumeReleased || pv.Spec.Local == nil || !strings.HasPrefix(pv.Spec.Local.Path, root) {
			continue
		}
		entries, err := os.ReadDir(pv.Spec.Local.Path)
		if err != nil {
			return n, err
		}
		for _, de := range entries {
			if err := os.RemoveAll(filepath.Join(pv.Spec.Local.Path, de.Name())); err != nil {
				return n, err
			}
		}
		patch := []byte(`[{"op":"test","path":"/status/phase","value":"Released"},{"op":"remove","path":"/spec/claimRef"}]`)
		if _, err := e.Clientset.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			return n, fmt.Errorf("free PV %s: %w", pv.Name, err)
		}
		n++
	}
	return n, nil
}

// Cluster runs test/cluster/cluster.sh with args (e.g. "restart", "kubelet")
// and returns its combined output.
func (e *Env) Cluster(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, Script(), args...)
	cmd.Env = append(os.Environ(), "KDEFER_CLUSTER_DIR="+e.Dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("cluster.sh %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.Bytes(), err
}

// LogFiles are the component logs of the current run (one file per component).
func (e *Env) LogFiles() []string {
	files, _ := filepath.Glob(filepath.Join(e.Dir, "logs", "*.log"))
	sort.Strings(files)
	return files
}

// DumpLogs writes the last lines of every component log to the test log.
func (e *Env) DumpLogs(t testing.TB, lines int) {
	t.Helper()
	for _, f := range e.LogFiles() {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Logf("%s: %v", f, err)
			continue
		}
		all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(all) > lines {
			all = all[len(all)-lines:]
		}
		t.Logf("===== %s (last %d lines)\n%s", f, len(all), strings.Join(all, "\n"))
	}
}
