package envtest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdefer/kdefer/test/repo"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// WithWebhooks installs the webhook configurations of deploy/webhook, with
// their service references replaced by a local server's URL and a CA of
// envtest's. Serve the webhooks on env.WebhookInstallOptions.LocalServingHost,
// LocalServingPort and LocalServingCertDir.
func WithWebhooks() Option {
	return func(e *ctrlenvtest.Environment) {
		e.WebhookInstallOptions.Paths = append(e.WebhookInstallOptions.Paths, filepath.Join(repo.MustRoot(), "deploy", "webhook", "webhooks.yaml"))
	}
}

// WithAPIServerArgs sets kube-apiserver flags.
func WithAPIServerArgs(kv ...string) Option {
	return func(e *ctrlenvtest.Environment) {
		args := e.ControlPlane.GetAPIServer().Configure()
		for i := 0; i+1 < len(kv); i += 2 {
			args.Set(kv[i], kv[i+1])
		}
	}
}

// DecodeObjects parses every document of a multi-document YAML.
func DecodeObjects(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading YAML: %v", err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("decoding YAML: %v", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// ReadObjects parses a manifest file of the repository (path relative to
// the repository root).
func ReadObjects(t testing.TB, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo.MustRoot(), path))
	if err != nil {
		t.Fatal(err)
	}
	return DecodeObjects(t, data)
}

// Kustomize builds a kustomization of the repository (e.g. "deploy") with
// the kubectl of KUBEBUILDER_ASSETS, as `kubectl apply -k` would.
func Kustomize(t testing.TB, dir string) []byte {
	t.Helper()
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(repo.MustRoot(), dir)).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return out
}

// Apply server-side applies objects (field manager "kdefer-test").
func Apply(t testing.TB, c client.Client, objs ...*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		o = o.DeepCopy()
		if err := c.Patch(context.Background(), o, client.Apply, client.FieldOwner("kdefer-test"), client.ForceOwnership); err != nil { //nolint:staticcheck // unstructured has no apply configuration
			t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// Impersonate returns a client that acts as user (in groups), e.g.
// "system:serviceaccount:kube-system:generic-garbage-collector".
func (e *Env) Impersonate(t testing.TB, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// RetainPolicyPath is the ValidatingAdmissionPolicy (and binding) that
// guards work PVCs while kdefer is down.
const RetainPolicyPath = "deploy/policy/retain-work-volumes.yaml"

// InstallRetainPolicy applies deploy/'s retained-volume admission policy and
// waits until the apiserver enforces it (policies load asynchronously).
func (e *Env) InstallRetainPolicy(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	Apply(t, e.Client, ReadObjects(t, RetainPolicyPath)...)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kdefer-policy-canary"}}
	if err := e.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: ns.Name, Labels: map[string]string{"kdefer.io/work-volume": "canary"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	if err := e.Client.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	gc := e.Impersonate(t, "system:serviceaccount:kube-system:generic-garbage-collector", "system:masters")
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := gc.Delete(ctx, pvc, client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "kdefer-retain-work-volumes") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retained-volume policy is not enforced after 30s (last dry-run delete: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
