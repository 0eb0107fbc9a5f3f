//go:build e2e

package e2e

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	rt "github.com/kdefer/kdefer/render/testing"
)

// webhookURL is where the local cluster's apiserver calls kdefer's Job
// webhook (deploy/helm/local-values.yaml): the host's loopback.
const webhookURL = "https://127.0.0.1:9443/mutate-batch-v1-job"

// TestForgedAdmissionReview: a client on the host, where the apiserver
// reaches the webhooks, posts a forged AdmissionReview for a Job naming a
// namespace's DeferPolicy: without the apiserver's client certificate it
// gets 403 and nothing of the policy (no patch, no URL, no Secret name),
// while the apiserver's own admission of the same Job renders it.
func TestForgedAdmissionReview(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "forged")
	s.create(&v1.DeferPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: s.ns},
		Spec:       v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://team-secret-bucket/{pod}/"}, Credentials: &corev1.LocalObjectReference{Name: "team-secret-creds"}},
	})
	// Suspended: rendered at admission, and no pod is ever made.
	job := rt.MakeJob("real", s.ns).Annotation(v1.AnnotationPolicy, "team").Obj()
	job.Spec.Suspend = ptr.To(true)
	s.create(job)
	if job.Spec.Template.Annotations[v1.AnnotationRendered] == "" {
		t.Error("the Job the apiserver admitted is not rendered")
	}

	forged := rt.MakeJob("forged", s.ns).Annotation(v1.AnnotationPolicy, "team").Obj()
	forged.APIVersion, forged.Kind = "batch/v1", "Job"
	raw, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	review, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "forged", Namespace: s.ns, Name: "forged", Operation: admissionv1.Create,
			Kind:     metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"},
			Resource: metav1.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"},
			Object:   runtime.RawExtension{Raw: raw}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the forger does not care whom it talks to
	resp, err := c.Post(webhookURL, "application/json", bytes.NewReader(review))
	if err != nil {
		s.logf("forged review refused at the handshake: %v", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("forged review answered %d, want 403:\n%s", resp.StatusCode, body)
	}
	for _, secret := range []string{"patch", "team-secret-bucket", "team-secret-creds"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("the answer to a forged review reveals %q:\n%s", secret, body)
		}
	}
}
