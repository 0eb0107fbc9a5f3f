//go:build e2e

package e2e

import (
	"context"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// Scenarios on a cluster of several nodes (test/cluster/cluster.sh up
// --nodes 3: a kubelet, containerd, cgroup root, node IP and pod subnet per
// node). Their names start with TestMultiNode: test/e2e/run.sh runs them in
// its multi-node phase only. On a one-node cluster they skip, unless
// KDEFER_E2E_MULTINODE=1 (set by that phase) says the nodes must be there.

// multiNodes is the node count the multi-node phase starts.
const multiNodes = 3

// requireNodes returns the names of the cluster's Ready nodes, at least
// multiNodes of them (every multi-node scenario is written for that many).
func requireNodes(t *testing.T, env *clusterenv.Env) []string {
	t.Helper()
	const n = multiNodes
	list, err := env.Clientset.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ready []string
	for _, nd := range list.Items {
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !nd.Spec.Unschedulable {
				ready = append(ready, nd.Name)
			}
		}
	}
	sort.Strings(ready)
	if len(ready) < n {
		if os.Getenv("KDEFER_E2E_MULTINODE") == "1" {
			t.Fatalf("%d schedulable Ready node(s) %v, the scenario needs %d (cluster.sh up --nodes %d)", len(ready), ready, n, n)
		}
		t.Skipf("%d schedulable Ready node(s), the scenario needs %d (test/e2e/run.sh's multi-node phase)", len(ready), n)
	}
	return ready
}

// spreadJob is an Indexed Job of pods pods at once, spread evenly over the
// nodes (topology spread on the hostname), each index staging out to its own
// prefix NAMESPACE/JOB/INDEX/POD/.
func (s *scenario) spreadJob(name string, w workload, pods int32) *batchv1.Job {
	job := s.job(name, w)
	job.Annotations[v1.AnnotationStageOut] = "s3://" + bucket + "/{namespace}/{job}/{index}/{pod}/" + s.s3Query()
	job.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	job.Spec.Completions, job.Spec.Parallelism = ptr.To(pods), ptr.To(pods)
	spread := map[string]string{"e2e-spread": s.ns}
	job.Spec.Template.Labels = spread
	job.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: spread},
	}}
	// An Indexed Job's pod has the hostname job-index, not its name: the
	// workload signals the test with its pod name instead.
	c := &job.Spec.Template.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	c.Command[2] = strings.ReplaceAll(w.script(s.sig.url), "$HOSTNAME", "$POD_NAME")
	return job
}

// TestMultiNodeIndexedJob: an Indexed Job of 6 pods at once, spread over 3
// nodes (2 each, topology spread on the hostname). Every pod's defer pod
// runs on that pod's own node (spec.nodeName, also the run's
// status.nodeName): its local work volume is there and nowhere else. Every
// index's outputs are at its own prefix; every volume is released and
// nothing is left.
func TestMultiNodeIndexedJob(t *testing.T) {
	t.Parallel()
	const pods = 6
	nodes := requireNodes(t, clusterenv.Require(t))
	s := newScenario(t, "spread", onAnyNode())
	// The defer pods hold (after the stage-out) until the test has seen where they run.
	s.create(s.holdPolicy("hold"))
	w := small
	w.mode = "exit 0"
	job := s.spreadJob("sweep", w, pods)
	job.Annotations[v1.AnnotationPolicy] = "hold"
	s.create(job)

	// Each pod writes its outputs and exits 0; then its defer pod stages
	// them out and signals from its hold step.
	mains, holding := map[string]bool{}, map[string]bool{}
	for len(mains) < pods || len(holding) < pods {
		p := s.waitReady(3 * time.Minute)
		if pod, ok := strings.CutPrefix(p, "defer-"); ok {
			holding[pod] = true
		} else {
			mains[p] = true
		}
	}
	perNode := map[string][]string{}
	index := map[string]string{} // pod -> completion index
	for pod := range mains {
		p, err := s.env.Clientset.CoreV1().Pods(s.ns).Get(s.ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node := p.Spec.NodeName
		perNode[node] = append(perNode[node], pod)
		index[pod] = p.Annotations[batchv1.JobCompletionIndexAnnotation]
		run := s.waitRun(pod, 30*time.Second, "with a defer pod", inProgress)
		dp := &corev1.Pod{}
		if err := s.env.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: run.Status.DeferPodName}, dp); err != nil {
			t.Fatalf("defer pod of %s: %v", pod, err)
		}
		if dp.Spec.NodeName != node {
			t.Errorf("defer pod %s runs on %q, its pod %s ran on %q", dp.Name, dp.Spec.NodeName, pod, node)
		}
		if run.Status.NodeName != node {
			t.Errorf("DeferRun %s: status.nodeName %q, its pod ran on %q", pod, run.Status.NodeName, node)
		}
	}
	s.logf("pods by node: %v", perNode)
	if len(perNode) != len(nodes) {
		t.Errorf("the pods ran on %d node(s), want all %d: %v", len(perNode), len(nodes), perNode)
	}
	for _, n := range nodes {
		if len(perNode[n]) != pods/len(nodes) {
			t.Errorf("node %s ran %d pod(s) %v, want %d (topology spread)", n, len(perNode[n]), perNode[n], pods/len(nodes))
		}
	}
	seen := map[string]bool{}
	for _, i := range index {
		seen[i] = true
	}
	if len(seen) != pods {
		t.Errorf("completion indexes %v, want %d distinct", index, pods)
	}
	for pod := range holding {
		s.sig.release("defer-" + pod)
	}
	for pod, i := range index {
		run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
		// The index's prefix: checkOutputs reads NAMESPACE/JOB/POD/, and
		// the template put the index between the job and the pod.
		s.checkOutputs("sweep/"+i, pod, w, v1.TriggerSucceeded)
		s.volumeReleased(run)
	}
	s.cleanUp("sweep")
}
