//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// Helpers that act on kdefer itself, the node and the defer pods.

const kdeferNS = "kdefer-system"

func (s *scenario) controllerPod() *corev1.Pod {
	s.t.Helper()
	pods, err := s.env.Clientset.CoreV1().Pods(kdeferNS).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kdefer,app.kubernetes.io/component=controller"})
	if err != nil {
		s.t.Fatal(err)
	}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i]
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// killController SIGKILLs the manager's process (as a crash or the OOM
// killer would); the kubelet restarts it. It returns the restart count
// before the kill, for waitController.
func (s *scenario) killController() int32 {
	s.t.Helper()
	p := s.controllerPod()
	if p == nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
		s.t.Fatal("no running kdefer-controller pod")
	}
	cs := p.Status.ContainerStatuses[0]
	id := strings.TrimPrefix(cs.ContainerID, "containerd://")
	if out, err := s.env.Cluster(s.ctx, "ctr", "tasks", "kill", "-s", "SIGKILL", id); err != nil {
		s.t.Fatalf("kill kdefer-controller: %v: %s", err, out)
	}
	s.logf("kdefer-controller killed (SIGKILL, restart count %d)", cs.RestartCount)
	return cs.RestartCount
}

// waitController waits until the kubelet has restarted the manager killed
// after restarts restarts and it is ready again.
func (s *scenario) waitController(restarts int32) {
	s.t.Helper()
	p := s.controllerPod()
	_, err := s.env.WaitPod(s.ctx, kdeferNS, p.Name, 90*time.Second, "restarted and ready", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount > restarts && podReady(p)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.logf("kdefer-controller back")
}

// stopKdefer scales kdefer to zero and waits until no manager runs (an
// outage starts it again).
func stopKdefer(s *scenario) {
	s.t.Helper()
	if out, err := kubectl(s.ctx, "-n", kdeferNS, "scale", "deployment/kdefer-controller", "--replicas=0"); err != nil {
		s.t.Fatalf("scale kdefer to 0: %v: %s", err, out)
	}
	err := clusterenv.WaitFor(s.ctx, 60*time.Second, "kdefer-controller pods to be gone", func(ctx context.Context) (bool, error) {
		pods, err := s.env.Clientset.CoreV1().Pods(kdeferNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kdefer"})
		return err == nil && len(pods.Items) == 0, err
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.logf("kdefer stopped")
}

var startMu sync.Mutex

// startKdefer scales kdefer to one and waits until it is ready (its
// readiness includes the webhook server).
func startKdefer(ctx context.Context, t *testing.T) {
	t.Helper()
	startMu.Lock()
	defer startMu.Unlock()
	if out, err := kubectl(ctx, "-n", kdeferNS, "scale", "deployment/kdefer-controller", "--replicas=1"); err != nil {
		t.Fatalf("scale kdefer to 1: %v: %s", err, out)
	}
	if out, err := kubectl(ctx, "-n", kdeferNS, "rollout", "status", "deployment/kdefer-controller", "--timeout=90s"); err != nil {
		t.Fatalf("kdefer did not become ready: %v: %s", err, out)
	}
}

func (s *scenario) startKdefer() {
	s.t.Helper()
	startKdefer(s.ctx, s.t)
	s.logf("kdefer started")
}

// holdPolicy is a DeferPolicy whose one defer container, after the
// built-in stage-out, signals ready as "defer-POD" and waits for the test's
// go: it keeps a defer run in progress as long as the test wants.
func (s *scenario) holdPolicy(name string) *v1.DeferPolicy {
	busybox := clusterenv.MustImage(s.t, "busybox")
	return &v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: v1.DeferPolicySpec{
			DeferContainers: []corev1.Container{{
				Name: "hold", Image: busybox, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", fmt.Sprintf(
					"timeout 30 wget -q -O /dev/null %[1]s/ready/defer-$KDEFER_POD && timeout 600 wget -q -O /dev/null %[1]s/go/defer-$KDEFER_POD", s.sig.url)},
			}},
		},
	}
}

// drain starts `kubectl drain` of the node for the pods matching selector
// in the background; the node is uncordoned when the test ends, whatever
// happens.
func (s *scenario) drain(selector string) *bg {
	s.t.Helper()
	s.t.Cleanup(func() { _, _ = kubectl(context.Background(), "uncordon", s.node) })
	return kubectlBG(s.ctx, "drain", s.node, "--pod-selector="+selector, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s")
}

// uncordon makes the node schedulable again.
func (s *scenario) uncordon() {
	s.t.Helper()
	if out, err := kubectl(s.ctx, "uncordon", s.node); err != nil {
		s.t.Fatalf("uncordon: %v: %s", err, out)
	}
}

// inProgress: the run has a defer pod.
func inProgress(r *v1.DeferRun) bool { return r.Status.DeferPodName != "" }

// bg runs a command in the background, streaming its output lines.
type bg struct {
	lines chan string
	done  chan error
	mu    sync.Mutex
	out   strings.Builder
}

func kubectlBG(ctx context.Context, args ...string) *bg {
	b := &bg{lines: make(chan string, 256), done: make(chan error, 1)}
	bin := kubectlBin()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", clusterenv.Dir() + "/kubeconfig"}, args...)...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		b.done <- err
		return b
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			b.mu.Lock()
			b.out.WriteString(sc.Text() + "\n")
			b.mu.Unlock()
			select {
			case b.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() { err := cmd.Wait(); pw.Close(); b.done <- err }()
	return b
}

func (b *bg) output() string { b.mu.Lock(); defer b.mu.Unlock(); return b.out.String() }

// waitLine waits for an output line containing sub.
func (b *bg) waitLine(t *testing.T, sub string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-b.lines:
			if strings.Contains(l, sub) {
				return
			}
		case err := <-b.done:
			b.done <- err
			t.Fatalf("command ended (%v) before printing %q:\n%s", err, sub, b.output())
		case <-deadline:
			t.Fatalf("no line %q within %s:\n%s", sub, timeout, b.output())
		}
	}
}

func (b *bg) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case err := <-b.done:
		b.done <- err
		if err != nil {
			t.Fatalf("command failed: %v\n%s", err, b.output())
		}
	case <-time.After(timeout):
		t.Fatalf("command still running after %s:\n%s", timeout, b.output())
	}
}

func (b *bg) running() bool {
	select {
	case err := <-b.done:
		b.done <- err
		return false
	default:
		return true
	}
}

// armedAtCreation checks that the arming webhook armed the pod: its work
// PVC was stored with the DeferRun as second owner when the
// ephemeral-volume controller created it. A patch by the controller would
// show in managedFields (an entry owning the run's ownerReference); a
// webhook's mutation of a creation is not tracked there.
func (s *scenario) armedAtCreation(pod string) {
	s.t.Helper()
	pvc, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).Get(s.ctx, pod+"-kdefer-work", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	var uid string
	for _, ref := range pvc.OwnerReferences {
		if ref.Kind == "DeferRun" && ref.Name == pod {
			uid = string(ref.UID)
		}
	}
	if uid == "" {
		s.t.Fatalf("work PVC %s owners %+v: no DeferRun", pvc.Name, pvc.OwnerReferences)
	}
	for _, mf := range pvc.ManagedFields {
		if mf.FieldsV1 != nil && strings.Contains(mf.FieldsV1.GetRawString(), uid) {
			s.t.Errorf("work PVC %s: the DeferRun's ownerReference was written by %s (%s) after the PVC's creation: armed by the controller, not by the webhook", pvc.Name, mf.Manager, mf.Operation)
		}
	}
}

// pvcGuarded checks that the pod's work PVC still exists and is Bound (the
// admission policy refused the garbage collector's DELETE).
func (s *scenario) pvcGuarded(pod string) {
	s.t.Helper()
	name := pod + "-kdefer-work"
	pvc, err := s.env.Clientset.CoreV1().PersistentVolumeClaims(s.ns).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("work PVC %s of pod %s while kdefer is down: %v", name, pod, err)
	}
	if pvc.Status.Phase != corev1.ClaimBound {
		s.t.Fatalf("work PVC %s is %s", name, pvc.Status.Phase)
	}
	if pvc.DeletionTimestamp != nil {
		s.t.Fatalf("work PVC %s is being deleted while kdefer is down", name)
	}
}

// waitManifest waits until the pod's manifest is in the bucket (for runs
// whose DeferRun may be gone with its Job by the time the test looks).
func (s *scenario) waitManifest(job, pod string, timeout time.Duration) { //nolint:unparam // a scenario names its Job
	s.t.Helper()
	key := s.ns + "/" + job + "/" + pod + "/_kdefer/manifest.json"
	err := clusterenv.WaitFor(s.ctx, timeout, "s3://"+bucket+"/"+key, func(ctx context.Context) (bool, error) {
		_, err := s.mc.StatObject(ctx, bucket, key, minioStat)
		return err == nil, nil
	})
	if err != nil {
		if r := s.run(pod); r != nil {
			err = fmt.Errorf("%w (DeferRun: trigger %q state %q %s steps %s)", err, r.Status.Trigger, r.Status.State, runConds(r), steps(r))
		}
		s.t.Fatal(err)
	}
}

// runTrigger checks the trigger of a DeferRun that may already be gone.
func (s *scenario) runTrigger(job, pod string, want v1.Trigger) {
	s.t.Helper()
	// The trigger is recorded with the run's first status write after its
	// defer pod (bookkeeping a few seconds later, or the outcome), which can
	// come after the manifest: wait for it, unless the run goes first (kdefer
	// deletes a finished run whose Job is gone): then the trigger the defer
	// pod was given is the manifest's, which must be there.
	var got v1.Trigger
	err := clusterenv.WaitFor(s.ctx, 30*time.Second, "DeferRun "+pod+" to record its trigger", func(ctx context.Context) (bool, error) {
		r := &v1.DeferRun{}
		err := s.env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, r)
		if apierrors.IsNotFound(err) {
			got = s.manifestTrigger(job, pod)
			s.logf("DeferRun %s already gone with its Job; its manifest's trigger is %q", pod, got)
			return true, nil
		}
		if err != nil {
			return false, err
		}
		got = r.Status.Trigger
		return got != "", nil
	})
	if err != nil {
		s.t.Error(err)
	}
	if got != want {
		s.t.Errorf("DeferRun %s: trigger %q, want %q", pod, got, want)
	}
}

// manifestTrigger is the trigger in pod's manifest in the bucket, "" (and
// an error) when there is none.
func (s *scenario) manifestTrigger(job, pod string) v1.Trigger {
	s.t.Helper()
	key := s.ns + "/" + job + "/" + pod + "/" + stagecontract.ManifestKey
	o, err := s.mc.GetObject(s.ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		s.t.Errorf("get s3://%s/%s: %v", bucket, key, err)
		return ""
	}
	defer o.Close()
	data, err := io.ReadAll(o)
	if err != nil {
		s.t.Errorf("read s3://%s/%s: %v", bucket, key, err)
		return ""
	}
	m, err := storage.ParseManifest(data)
	if err != nil {
		s.t.Errorf("s3://%s/%s: %v", bucket, key, err)
		return ""
	}
	return v1.Trigger(m.Trigger)
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// podStopped: every container of the pod has terminated.
func podStopped(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return true
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Terminated == nil {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// finishes describes how the pod's containers ended.
func finishes(p *corev1.Pod) string {
	var b []string
	for _, c := range p.Status.ContainerStatuses {
		if t := c.State.Terminated; t != nil {
			b = append(b, fmt.Sprintf("%s exit %d %s at %s", c.Name, t.ExitCode, t.Reason, t.FinishedAt.UTC().Format(time.RFC3339)))
		}
	}
	return strings.Join(b, "; ")
}

// pvcStaysGuarded checks, for a while, that the pod's work PVC stays Bound
// and not deleted (a negative check: it polls for the whole window).
func (s *scenario) pvcStaysGuarded(pod string, window time.Duration) {
	s.t.Helper()
	end := time.Now().Add(window)
	for {
		s.pvcGuarded(pod)
		if time.Now().After(end) {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling interval of the window
	}
}
