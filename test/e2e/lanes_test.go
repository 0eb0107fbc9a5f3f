//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kdefer/kdefer/test/clusterenv"
)

// The e2e cluster has three nodes (test/e2e/run.sh). The scenarios written
// for one node run side by side on the first: their namespaces' node
// selector keeps their pods there, and the cluster's default node selector
// keeps kdefer's manager and the other projects' managers there too
// (cluster.sh, KDEFER_CLUSTER_DEFAULT_NODE_SELECTOR). The scenarios that
// disrupt their node (drain or taint it, fill its disk, restart its
// kubelet) ran one at a time before all the others on the one node; each
// now takes one of the two other nodes for itself while the rest run on the
// first, one scenario at a time per node. Serial still (before the parallel
// ones, no t.Parallel): the scenarios that stop kdefer itself
// (TestControllerKilled, TestKdeferDown; every scenario waits on kdefer, and
// none may find it down; run.sh runs them in a go test of their own, before
// the others) and TestBurst, which loads the whole machine.

// The node each disruptive scenario takes: about as much time on each
// (~65 s of scenarios, measured alone 2026-12-02).
const (
	// nodeDisk: TestDiskPressure, TestTaintEviction, TestPrePull (which
	// removes the stage image from the node).
	nodeDisk = 2
	// nodeDrain: TestDrain, TestDrainDuringStageSteps,
	// TestKubeletRestartedDuringStageOut, TestNodeCrash.
	nodeDrain = 3
)

var nodeLocks [nodeDrain + 1]sync.Mutex

// firstNodeScenarios bounds how many scenarios run at once on the first
// node (newScenario): the parallel scenarios waiting for a node of their
// own hold go test's -parallel slots (run.sh gives it room for them), so
// the first node's share is bounded here instead (timerBound scenarios,
// which mostly wait, take no slot).
var firstNodeScenarios = make(chan struct{}, 8)

// reserveNode makes the calling scenario a parallel test that has node i
// of the cluster (cluster.sh's name: the first node's, then -i) to itself
// until it ends, and returns the node's name. On a cluster without that
// node it returns the first node's and the scenario runs serially (no
// t.Parallel), before the parallel ones, as on a cluster of one node.
func reserveNode(t *testing.T, i int) string {
	t.Helper()
	env := clusterenv.Require(t)
	name := fmt.Sprintf("%s-%d", env.NodeName, i)
	if _, err := env.Clientset.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Logf("no node %s: running serially on %s", name, env.NodeName)
		return env.NodeName
	} else if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	t.Parallel()
	nodeLocks[i].Lock()
	t.Cleanup(nodeLocks[i].Unlock)
	return name
}
