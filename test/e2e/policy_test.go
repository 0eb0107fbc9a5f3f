//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// TestNamespaceDefaultPolicy: a namespace's default DeferPolicy, which locks
// the destination and the credentials, binds a Job that names no policy and
// sets neither: its outputs reach the default's URL with the default's
// Secret. A Job that names another policy of the namespace is refused at
// admission, naming both policies.
func TestNamespaceDefaultPolicy(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "nsdefault")
	s.create(&v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: s.ns},
		Spec:       v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://" + bucket + "/elsewhere/{pod}/" + s.s3Query()}},
	})
	s.create(&v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "platform", Namespace: s.ns},
		Spec: v1.DeferPolicySpec{NamespaceDefault: true, StageOut: &v1.StageOut{URL: s.stageOutURL()},
			Credentials: &corev1.LocalObjectReference{Name: "minio"},
			Locked:      []v1.LockedField{v1.LockedStageOut, v1.LockedCredentials}},
	})

	// The webhooks read the default from the API server: the moment after
	// it is created, a Job naming another policy is refused.
	w := small
	w.mode = "exit 0"
	other := s.job("other", w)
	delete(other.Annotations, v1.AnnotationStageOut)
	delete(other.Annotations, v1.AnnotationCredentials)
	other.Annotations[v1.AnnotationPolicy] = "team"
	err := s.env.Client.Create(s.ctx, other)
	if err == nil {
		t.Fatalf("a Job naming another policy than the locked default was admitted")
	}
	if !strings.Contains(err.Error(), `annotation kdefer.io/policy: names DeferPolicy "team", but DeferPolicy "platform" is the default of namespace `+s.ns) {
		t.Fatalf("a Job naming another policy: %v", err)
	}
	s.logf("refused: %v", err)

	job := s.job("sim", w)
	delete(job.Annotations, v1.AnnotationStageOut)
	delete(job.Annotations, v1.AnnotationCredentials)
	s.create(job)
	pod := s.waitReady(2 * time.Minute)
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	if run.Spec.PolicyName != "platform" {
		t.Errorf("run armed with policy %q, want the default, platform", run.Spec.PolicyName)
	}
	s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
	s.volumeReleased(run)
	s.cleanUp("sim")
}
