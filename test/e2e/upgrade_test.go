//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/test/repo"
)

// TestUpgradeRollback: kdefer upgraded, rolled back and upgraded again with
// runs at every stage, as an operator would with Helm: the previous release
// (N-1, run.sh's release_previous: the commit test/e2e/previous-release
// names, released to the test registry as make release would) replaces the
// tier's release (N) first, then
//   - under N-1: "done" ends and is staged out; "armeda" is armed (its pod
//     runs); "flighta" ends and its defer pod, past the stage-out, holds in
//     a defer container;
//   - helm upgrade to N with both in flight; then armeda's pod ends and
//     flighta's defer container is let go, under N; "armedb" is armed and
//     "flightb" ends, held, under N;
//   - helm rollback to N-1 with those in flight; flightb is let go under N-1;
//   - helm upgrade to N again; armedb's pod ends, under N.
//
// Every Job's outputs are in the bucket with a manifest; every DeferRun is
// the one made at the start (same UID), Succeeded, its stage-out run once
// (one attempt; the manifests written before an upgrade keep their ETag and
// time); the defer pods in flight are adopted, not made again; nothing is left, no pod, PVC or finalizer. The scenario ends with N
// installed as run.sh installed it; run.sh runs it with the scenarios that
// change kdefer's install, apart from every other.
func TestUpgradeRollback(t *testing.T) {
	if i := os.Getenv("KDEFER_E2E_INSTALL"); i != "" && i != "helm" {
		t.Skipf("KDEFER_E2E_INSTALL=%s: kdefer is not a Helm release to upgrade", i)
	}
	prev, cur := os.Getenv("KDEFER_E2E_PREVIOUS_VERSION"), os.Getenv("KDEFER_E2E_VERSION")
	if prev == "" || cur == "" || os.Getenv("KDEFER_E2E_CHART") == "" {
		t.Fatal("KDEFER_E2E_CHART, KDEFER_E2E_VERSION and KDEFER_E2E_PREVIOUS_VERSION: test/e2e/run.sh releases both and sets them")
	}
	// Whatever happens, N is installed again at the end, as run.sh installed it.
	t.Cleanup(func() { helmRelease(t, cur) })

	w := small
	w.mode = "exit 0"
	hold := small
	hold.mode = "wait 0"
	done, armedA, flightA := newScenario(t, "upg-done"), newScenario(t, "upg-armeda"), newScenario(t, "upg-flighta")
	armedB, flightB := newScenario(t, "upg-armedb"), newScenario(t, "upg-flightb")
	type started struct {
		s   *scenario
		w   workload
		pod string
		uid types.UID
	}
	var all []*started
	// start creates the scenario's Job (its defer pod held by a defer
	// container when held) and waits until its pod has written its outputs
	// and its run is armed.
	start := func(s *scenario, w workload, held bool) *started {
		job := s.job("sim", w)
		if held {
			s.create(s.holdPolicy("hold"))
			job.Annotations[v1.AnnotationPolicy] = "hold"
		}
		s.create(job)
		pod := s.waitReady(2 * time.Minute)
		run := s.waitRun(pod, 30*time.Second, "armed", func(r *v1.DeferRun) bool { return len(r.Spec.Volumes) > 0 })
		st := &started{s: s, w: w, pod: pod, uid: run.UID}
		all = append(all, st)
		return st
	}
	// inFlight waits until the held run's defer pod has staged out and
	// holds; what the manifest is then must not change (staged out once).
	inFlight := func(st *started) string {
		if ready := st.s.waitReady(2 * time.Minute); ready != "defer-"+st.pod {
			t.Fatalf("unexpected ready signal %q, want defer-%s", ready, st.pod)
		}
		return st.s.manifestStamp("sim", st.pod)
	}

	helmRelease(t, prev)
	d := start(done, w, false)
	done.waitFinished(d.pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)
	doneStamp := done.manifestStamp("sim", d.pod)
	a := start(armedA, hold, false)
	fa := start(flightA, w, true)
	faStamp := inFlight(fa)

	helmRelease(t, cur)
	armedA.sig.release(a.pod)
	flightA.sig.release("defer-" + fa.pod)
	b := start(armedB, hold, false)
	fb := start(flightB, w, true)
	fbStamp := inFlight(fb)
	armedA.waitFinished(a.pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)
	flightA.waitFinished(fa.pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)

	helmRollback(t, prev)
	// The rollback applies N-1's CRDs (they are templates of the chart):
	// what docs/usage.md's "Upgrade and rollback" tells.
	runs, policies := crdFields(t)
	t.Logf("after the rollback, N's fields served: DeferRun status.retainedBytes %q, DeferPolicy triggerRules[].url %q", runs, policies)
	flightB.sig.release("defer-" + fb.pod)
	flightB.waitFinished(fb.pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)

	helmRelease(t, cur)
	if runs, policies := crdFields(t); runs != "integer" || policies != "string" {
		t.Errorf("upgraded again: DeferRun status.retainedBytes %q, DeferPolicy triggerRules[].url %q: want N's CRDs served (integer, string)", runs, policies)
	}
	armedB.sig.release(b.pod)
	armedB.waitFinished(b.pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)

	for _, st := range all {
		run := st.s.waitFinished(st.pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, time.Minute)
		if run.UID != st.uid {
			t.Errorf("DeferRun %s/%s: UID %s, want %s, the run made when its pod started", st.s.ns, st.pod, run.UID, st.uid)
		}
		if s := run.Status.Steps; len(s) == 0 || s[0].Name != "stage-out" || s[0].Attempts != 1 {
			t.Errorf("DeferRun %s/%s: steps %s, want one stage-out attempt", st.s.ns, st.pod, steps(run))
		}
		st.s.checkOutputs("sim", st.pod, st.w, v1.TriggerSucceeded)
		st.s.volumeReleased(run)
		st.s.noFinalizer(st.pod)
	}
	for _, c := range []struct {
		s          *scenario
		pod, stamp string
	}{{done, d.pod, doneStamp}, {flightA, fa.pod, faStamp}, {flightB, fb.pod, fbStamp}} {
		if got := c.s.manifestStamp("sim", c.pod); got != c.stamp {
			t.Errorf("%s/%s: manifest %s, want %s as first written: staged out again", c.s.ns, c.pod, got, c.stamp)
		}
	}
	// Adopted, not replaced: a defer pod made again across a Helm change
	// would skip the stage-out that had succeeded (as after a node's
	// crash) but run its defer container again, which says ready once more.
	for _, st := range []*started{fa, fb} {
		select {
		case p := <-st.s.sig.ready:
			t.Errorf("%s: %s said ready again: the defer pod in flight across the Helm change was replaced, not adopted", st.s.ns, p)
		default:
		}
	}
	for _, st := range all {
		st.s.cleanUp("sim")
	}
}

// manifestStamp is the ETag and time of the run's manifest in the bucket: a
// second stage-out would write it again.
func (s *scenario) manifestStamp(job, pod string) string {
	s.t.Helper()
	key := s.ns + "/" + job + "/" + pod + "/" + stagecontract.ManifestKey
	o, err := s.mc.StatObject(s.ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		s.t.Fatalf("stat s3://%s/%s: %v", bucket, key, err)
	}
	return o.ETag + " " + o.LastModified.Format(time.RFC3339Nano)
}

// helmRelease is a helm upgrade of the e2e install to version of the
// released chart (KDEFER_E2E_CHART): this tree's (KDEFER_E2E_VERSION)
// with deploy/helm/local-values.yaml, or the previous release's with the
// values of its own tree (KDEFER_E2E_PREVIOUS_VALUES), and
// KDEFER_E2E_HELM_ARGS, as run.sh installs kdefer; it waits until that
// version runs.
func helmRelease(t *testing.T, version string) {
	t.Helper()
	values := filepath.Join(repo.MustRoot(), "deploy/helm/local-values.yaml")
	if version == os.Getenv("KDEFER_E2E_PREVIOUS_VERSION") {
		values = os.Getenv("KDEFER_E2E_PREVIOUS_VALUES")
	}
	args := []string{"-n", kdeferNS, "--chart", os.Getenv("KDEFER_E2E_CHART"), "--version", strings.TrimPrefix(version, "v"), "-f", values}
	helmInstall(t, "helm upgrade to "+version, append(args, strings.Fields(os.Getenv("KDEFER_E2E_HELM_ARGS"))...)...)
	controllerRuns(t, version)
}

// helmRollback is `helm rollback kdefer` (to the revision before), after
// which version runs.
func helmRollback(t *testing.T, version string) {
	t.Helper()
	helmInstall(t, "helm rollback to "+version, "-n", kdeferNS, "--rollback")
	controllerRuns(t, version)
}

// controllerRuns checks that the controller's Deployment runs version's image.
func controllerRuns(t *testing.T, version string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	img, err := kubectl(ctx, "-n", kdeferNS, "get", "deployment/kdefer-controller", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
	if err != nil || !strings.HasSuffix(img, ":"+version) {
		t.Fatalf("kdefer-controller's image %q (%v), want version %s", img, err, version)
	}
}

// helmInstall runs test/helminstall (built by run.sh) with args, then waits
// until the controller and the node agents run what it applied and the
// controller has put its CA back in the webhook configurations.
func helmInstall(t *testing.T, what string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, program(t, "./test/helminstall"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, out)
	}
	// The upgrade re-applies the webhook configurations; the new
	// controller puts its CA back in them as it starts.
	waitKdeferReady(ctx, t)
	t.Logf("%s in %s", what, time.Since(t0).Round(100*time.Millisecond))
}

// crdFields is the type the served CRDs give two fields N added
// (DeferRun status.retainedBytes, DeferPolicy triggerRules[].url), "" where
// they have none: whose CRDs the cluster serves.
func crdFields(t *testing.T) (runs, policies string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	get := func(crd, path string) string {
		out, err := kubectl(ctx, "get", "crd", crd, "-o", "jsonpath={.spec.versions[0].schema.openAPIV3Schema.properties."+path+".type}")
		if err != nil {
			t.Fatalf("kubectl get crd %s: %v: %s", crd, err, out)
		}
		return strings.TrimSpace(out)
	}
	return get("deferruns.kdefer.io", "status.properties.retainedBytes"),
		get("deferpolicies.kdefer.io", "spec.properties.triggerRules.items.properties.url")
}
