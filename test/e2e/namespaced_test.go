//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// TestNamespacedInstall: kdefer installed for one namespace (the chart's
// watchNamespaces, by a helm upgrade of the e2e install, undone when the
// scenario ends) stages out a Job there, and leaves an opted-in Job of
// another namespace alone: not rendered, its pod without kdefer's
// finalizer or label, no DeferRun. run.sh runs it with the scenarios that
// stop kdefer, before and apart from every other, which see the
// cluster-wide install.
func TestNamespacedInstall(t *testing.T) {
	served := newScenario(t, "ns-served")
	other := newScenario(t, "ns-other")
	upgradeKdefer(t, "watchNamespaces=[\""+served.ns+"\"]")
	// Back to every namespace: an explicit empty list over the release's
	// values ("{}" with --set is [""], and null did not drop the value).
	t.Cleanup(func() { upgradeKdefer(t, "watchNamespaces=[]") })

	// Outside: the opted-in Job is created as written and its pod runs
	// and ends without kdefer.
	w := small
	w.mode = "exit 0"
	outside := other.job("sim", w)
	outside.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", "echo outside kdefer"}
	other.create(outside)

	job := &batchv1.Job{}
	served.fromExample("annotations-only/job.yaml", job)
	served.create(job)
	pod := served.waitJobPodRunning(job.Name, 2*time.Minute)
	served.armedAtCreation(pod)
	run := served.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	served.checkExample("runs/"+served.ns+"/"+job.Name+"/"+pod+"/", v1.TriggerSucceeded, "out/progress.log", "out/result.txt", "out/SHA256SUMS")
	served.volumeReleased(run)
	served.noFinalizer(pod)

	// By now the outside Job has long ended; kdefer had the time to act
	// on it and did not.
	err := clusterenv.WaitFor(other.ctx, 2*time.Minute, "Job "+other.ns+"/sim complete", func(ctx context.Context) (bool, error) {
		j := &batchv1.Job{}
		if err := other.env.Client.Get(ctx, client.ObjectKey{Namespace: other.ns, Name: "sim"}, j); err != nil {
			return false, err
		}
		return j.Status.Succeeded == 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := &batchv1.Job{}
	if err := other.env.Client.Get(other.ctx, client.ObjectKey{Namespace: other.ns, Name: "sim"}, got); err != nil {
		t.Fatal(err)
	}
	if a := got.Spec.Template.Annotations[v1.AnnotationRendered]; a != "" || len(got.Spec.Template.Spec.InitContainers) > 0 {
		t.Errorf("Job %s/sim outside the served namespace was rendered (%s=%q, %d init containers)", other.ns, v1.AnnotationRendered, a, len(got.Spec.Template.Spec.InitContainers))
	}
	for _, p := range other.podsOf("sim") {
		if len(p.Finalizers) > 0 || p.Labels[v1.LabelManaged] != "" {
			t.Errorf("pod %s/%s outside the served namespace: finalizers %v, label %s=%q; want none", other.ns, p.Name, p.Finalizers, v1.LabelManaged, p.Labels[v1.LabelManaged])
		}
	}
	runs := &v1.DeferRunList{}
	if err := other.env.Client.List(other.ctx, runs, client.InNamespace(other.ns)); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) > 0 {
		t.Errorf("%d DeferRuns in %s, outside the served namespace; want none", len(runs.Items), other.ns)
	}
	served.cleanUp(job.Name)
	other.cleanUp("sim")
}

// upgradeKdefer is a helm upgrade of the e2e install (test/helminstall,
// built by run.sh) with one more value (JSON) over the release's own, then waits
// until the controller and the node agents run with it.
func upgradeKdefer(t *testing.T, set string) {
	t.Helper()
	helmInstall(t, "helm upgrade --set-json "+set, "-n", kdeferNS, "--reuse-values", "--set-json", set)
}
