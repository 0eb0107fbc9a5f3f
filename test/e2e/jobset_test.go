//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// JobSets (issue #17): JobSet makes plain Jobs from each replicated Job's
// template, copying the template's labels and annotations to them, so a
// template that opts in makes Jobs kdefer's Job webhook renders, as any
// opted-in Job. kdefer knows no JobSet type.

// TestJobSet: a JobSet of one replicated Job, 2 replicas, whose template
// carries kdefer's label and annotations; JobSet makes 2 Jobs of one pod
// each (JOBSET-REPLICATEDJOB-INDEX), both rendered, and each pod stages out
// under its own Job's and pod's prefix (outputs, manifest, logs), its
// volume released; the JobSet completes with kdefer's finalizers on its
// pods, and once it is deleted nothing is left.
func TestJobSet(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "jobset")
	s.useJobSet()
	w := small
	w.mode = "exit 0"
	// The opted-in Job as every scenario builds it, as the replicated
	// Job's template: its label and annotations on template.metadata.
	job := s.job("workers", w)
	job.Spec.Completions, job.Spec.Parallelism = ptr.To[int32](1), ptr.To[int32](1)
	// JobSet's Jobs are Indexed (its default, for its DNS hostnames): a
	// pod's hostname is JOB-INDEX, not its name, so the workload signals
	// the test with its pod name instead.
	c := &job.Spec.Template.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	c.Command[2] = strings.ReplaceAll(c.Command[2], "$HOSTNAME", "$POD_NAME")
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&batchv1.JobTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: job.Labels, Annotations: job.Annotations},
		Spec:       job.Spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	js := manifestObject(fmt.Sprintf(`apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: train
  namespace: %s
`, s.ns))
	if err := unstructured.SetNestedSlice(js.Object, []any{map[string]any{
		"name": "workers", "replicas": int64(2), "template": tmpl,
	}}, "spec", "replicatedJobs"); err != nil {
		t.Fatal(err)
	}
	s.create(js)

	pods := []string{s.waitReady(3 * time.Minute), s.waitReady(3 * time.Minute)}
	var jobs []string
	for _, pod := range pods {
		run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
		jobs = append(jobs, run.Spec.JobName)
		s.checkOutputs(run.Spec.JobName, pod, w, v1.TriggerSucceeded)
		s.volumeReleased(run)
	}
	sort.Strings(jobs)
	if want := []string{"train-workers-0", "train-workers-1"}; strings.Join(jobs, " ") != strings.Join(want, " ") {
		t.Errorf("the pods' runs name Jobs %v, want %v (one pod in each of JobSet's Jobs)", jobs, want)
	}
	s.waitJobSet("train", "Completed", 2*time.Minute)
	if err := s.env.Client.Delete(s.ctx, js, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	s.cleanUp(jobs...)
}

// waitJobSet waits until JobSet name has condition cond True.
func (s *scenario) waitJobSet(name, cond string, timeout time.Duration) {
	s.t.Helper()
	err := clusterenv.WaitFor(s.ctx, timeout, fmt.Sprintf("JobSet %s/%s %s", s.ns, name, cond), func(ctx context.Context) (bool, error) {
		js := &unstructured.Unstructured{}
		js.SetAPIVersion("jobset.x-k8s.io/v1alpha2")
		js.SetKind("JobSet")
		if err := s.env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, js); err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(js.Object, "status", "conditions")
		for _, c := range conds {
			if m := c.(map[string]any); m["type"] == cond && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}
