package envtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/envtest"
)

// A DeferRun's spec is kdefer's: a namespace user who may edit DeferRuns
// (here: anyone RBAC lets through) cannot rewrite the policy a run follows
// (another stage-out URL, another credentials Secret) or its volumes; the
// annotations `kdefer retry` and `kdefer release` write still pass, and
// kdefer-controller still changes the spec (deploy/policy/deferrun-spec.yaml,
// enforced by a real apiserver).
func TestDeferRunSpecIsKdefers(t *testing.T) {
	env := envtest.Start(t)
	ctx := context.Background()
	envtest.Apply(t, env.Client, envtest.ReadObjects(t, "deploy/policy/deferrun-spec.yaml")...)
	ns := namespace(t, env, "runs")
	run := &v1.DeferRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns},
		Spec: v1.DeferRunSpec{PodName: "p", PodUID: types.UID("u1"), Policy: v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://results/x/"}}}}
	if err := env.Client.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	user := env.Impersonate(t, "alice", "system:masters")
	kdefer := env.Impersonate(t, "system:serviceaccount:kdefer-system:kdefer-controller", "system:masters")
	patch := func(c client.Client, p string) error {
		return c.Patch(ctx, &v1.DeferRun{ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: ns}}, client.RawPatch(types.MergePatchType, []byte(p)))
	}
	// Policies load asynchronously: wait until the user's rewrite is refused.
	steal := `{"spec":{"policy":{"stageOut":{"url":"s3://attacker/loot/"}}}}`
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := patch(user, steal)
		if err != nil && strings.Contains(err.Error(), "only kdefer-controller changes it") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a user rewrote DeferRun %s's stage-out URL: %v", run.Name, err)
		}
		if err == nil { // before the policy loaded: put it back
			if err := patch(kdefer, `{"spec":{"policy":{"stageOut":{"url":"s3://results/x/"}}}}`); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := patch(user, `{"spec":{"policy":{"credentials":{"name":"other-secret"}}}}`); err == nil {
		t.Error("a user changed DeferRun's credentials Secret")
	}
	if err := patch(user, `{"metadata":{"annotations":{"`+v1.AnnotationRetry+`":"1"}}}`); err != nil {
		t.Errorf("kdefer retry's annotation refused: %v", err)
	}
	if err := patch(user, `{"metadata":{"annotations":{"`+v1.AnnotationRelease+`":"true"}}}`); err != nil {
		t.Errorf("kdefer release's annotation refused: %v", err)
	}
	if err := patch(kdefer, `{"spec":{"policy":{"stageOut":{"url":"s3://results/y/"}}}}`); err != nil {
		t.Errorf("kdefer-controller refused its own spec change: %v", err)
	}
}
