package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	"github.com/kdefer/kdefer/nodelogs"
	"github.com/kdefer/kdefer/test/envtest"
)

func TestNamespacesFlag(t *testing.T) {
	var n Namespaces
	for _, v := range []string{"a,b", " b , c"} {
		if err := n.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	if got := n.String(); got != "a,b,c" {
		t.Errorf("namespaces %q, want a,b,c (each once, in order)", got)
	}
	for _, bad := range []string{"", "a,,b", "Team-A", "a/b"} {
		var n Namespaces
		err := n.Set(bad)
		if err == nil || !strings.Contains(err.Error(), "--namespaces=a,b") {
			t.Errorf("Set(%q): %v, want an error naming the fix", bad, err)
		}
	}
	if o := (Namespaces{}).scope(controller.CacheOptions()); o.DefaultNamespaces != nil {
		t.Errorf("no namespaces: DefaultNamespaces %v, want none (every namespace)", o.DefaultNamespaces)
	}
	if o := (Namespaces{"a", "b"}).scope(controller.CacheOptions()); len(o.DefaultNamespaces) != 2 || o.ByObject == nil {
		t.Errorf("namespaces a, b: DefaultNamespaces %v (ByObject kept: %v)", o.DefaultNamespaces, o.ByObject != nil)
	}
}

// TestNodeAgentWatchesItsNamespaces: a namespaced node agent keeps the logs
// of kdefer's pods in its namespaces only, on a real apiserver, and prunes
// what its spool held of pods elsewhere (kept by a cluster-wide agent
// before).
func TestNodeAgentWatchesItsNamespaces(t *testing.T) {
	env := envtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const node = "node-1"
	pods := map[string]*corev1.Pod{}
	for _, ns := range []string{"served", "elsewhere"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "job-x", Labels: map[string]string{v1.LabelManaged: "true"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
				TerminationGracePeriodSeconds: ptr.To[int64](0)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[ns] = p
	}
	spoolDir := t.TempDir()
	for _, p := range pods {
		if err := os.Mkdir(filepath.Join(spoolDir, string(p.UID)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	spool := &nodelogs.Spool{PodLogsDir: t.TempDir(), Dir: spoolDir, Log: testr.New(t)}
	synced, err := watchKeptPods(ctx, cs, node, Namespaces{"served"}, spool, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	spooled := func(ns string) bool {
		_, err := os.Stat(filepath.Join(spoolDir, string(pods[ns].UID)))
		return err == nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for !synced() || spooled("elsewhere") {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: synced %v, the spool still holds the pod of namespace elsewhere: %v", synced(), spooled("elsewhere"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !spooled("served") {
		t.Errorf("the spool lost the pod of its own namespace served")
	}
}
