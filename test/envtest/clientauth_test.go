package envtest_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kwebhook "github.com/kdefer/kdefer/controller/webhook"
	"github.com/kdefer/kdefer/controller/webhook/clientauth"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/test/envtest"
)

// apiserverClientName is the common name of the certificate the apiserver
// presents to kdefer's webhooks, here as in test/cluster.
const apiserverClientName = "kube-apiserver-webhook-client"

// TestWebhookClientAuth: with a webhook client CA, the apiserver (which
// presents a certificate that CA signed, through its admission
// configuration's kubeconfig) still has opted-in Jobs rendered, while a
// forged AdmissionReview, the request any pod that reaches the webhook port
// could send for another namespace, learns nothing of that namespace's
// policy: no certificate, a certificate of another CA or one of the CA with
// another name is refused.
func TestWebhookClientAuth(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newTestCA(t, dir, "ca")
	writeClientCert(t, dir, "apiserver", apiserverClientName, ca, caKey)
	writeClientCert(t, dir, "other-name", "system:node:worker", ca, caKey)
	rogue, rogueKey := newTestCA(t, dir, "rogue-ca")
	writeClientCert(t, dir, "rogue", apiserverClientName, rogue, rogueKey)
	env := envtest.Start(t, envtest.WithWebhooks(),
		envtest.WithAPIServerArgs("admission-control-config-file", admissionConfig(t, dir)))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	wio := env.WebhookInstallOptions
	srv, err := kwebhook.NewServer(kwebhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		ClientAuth: clientauth.Options{CAFile: filepath.Join(dir, "ca.crt"), Names: []string{apiserverClientName}}})
	if err != nil {
		t.Fatal(err)
	}
	kwebhook.Register(srv, kwebhook.NewHandlers(kwebhook.Options{Render: renderOpts}, env.Client))
	go func() {
		if err := srv.Start(ctx); err != nil {
			t.Errorf("webhook server: %v", err)
		}
	}()
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	waitTLS(t, addr)

	// Another team's namespace and policy: what a forger is after.
	ns := namespace(t, env, "other-team")
	policy := rt.MakePolicy("team", ns, "s3://other-team-bucket/{job}/{pod}/").Credentials("other-team-creds").Obj()
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}

	t.Run("the apiserver's admissions", func(t *testing.T) {
		job := rt.MakeJob("sim", ns).Annotation(v1.AnnotationPolicy, "team").Obj()
		if err := env.Client.Create(ctx, job); err != nil {
			t.Fatalf("create: %v", err)
		}
		if job.Spec.Template.Annotations[v1.AnnotationRendered] == "" {
			t.Error("the Job the apiserver admitted is not rendered")
		}
	})

	review := forgedReview(t, ns)
	for _, tc := range []struct {
		name, cert string
		status     int // 0: the TLS handshake fails
	}{
		{name: "no client certificate", status: http.StatusForbidden},
		{name: "a certificate of another CA", cert: "rogue"},
		{name: "a certificate of the CA with another name", cert: "other-name", status: http.StatusForbidden},
	} {
		t.Run("forged review: "+tc.name, func(t *testing.T) {
			status, body, err := post(t, "https://"+addr+kwebhook.MutateJobPath, review, dir, tc.cert)
			if tc.status == 0 {
				if err == nil {
					t.Errorf("answered %d, want a failed TLS handshake; body:\n%s", status, body)
				}
			} else if err != nil || status != tc.status {
				t.Errorf("status %d (error %v), want %d; body:\n%s", status, err, tc.status, body)
			}
			for _, secret := range []string{"other-team-creds", "other-team-bucket", "patch"} {
				if strings.Contains(body, secret) {
					t.Errorf("the answer reveals %q:\n%s", secret, body)
				}
			}
		})
	}
	t.Run("the apiserver's certificate", func(t *testing.T) {
		// The same request with the apiserver's certificate is answered:
		// what refuses the others is the certificate, not the request.
		status, body, err := post(t, "https://"+addr+kwebhook.MutateJobPath, review, dir, "apiserver")
		if err != nil || status != http.StatusOK || !strings.Contains(body, `"patch"`) {
			t.Errorf("status %d (error %v), want 200 with a patch; body:\n%s", status, err, body)
		}
	})
}

// forgedReview is an AdmissionReview for a Job in ns naming its policy, as
// a pod could write one.
func forgedReview(t *testing.T, ns string) []byte {
	t.Helper()
	job := rt.MakeJob("forged", ns).Annotation(v1.AnnotationPolicy, "team").Obj()
	job.APIVersion, job.Kind = "batch/v1", "Job"
	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "forged", Namespace: ns, Name: "forged", Operation: admissionv1.Create,
			Kind:     metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"},
			Resource: metav1.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"},
			Object:   runtime.RawExtension{Raw: raw}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends body to url with the client certificate dir/cert.crt (none
// for ""), trusting any server, as a forger would.
func post(t *testing.T, url string, body []byte, dir, cert string) (int, string, error) {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the forger does not care whom it talks to
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(filepath.Join(dir, cert+".crt"), filepath.Join(dir, cert+".key"))
		if err != nil {
			t.Fatal(err)
		}
		// Presented whatever CAs the server names (a Go client would
		// otherwise keep a certificate of another CA to itself).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil }
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// admissionConfig writes the apiserver's admission configuration: both
// webhook plugins present dir/apiserver.crt to every webhook ("*").
func admissionConfig(t *testing.T, dir string) string {
	t.Helper()
	kubeconfig := filepath.Join(dir, "webhook-client.kubeconfig")
	write(t, kubeconfig, `apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: `+filepath.Join(dir, "apiserver.crt")+`
    client-key: `+filepath.Join(dir, "apiserver.key")+`
`)
	cfg := filepath.Join(dir, "admission.yaml")
	write(t, cfg, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: `+kubeconfig+`
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: `+kubeconfig+`
`)
	return cfg
}

func newTestCA(t *testing.T, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, name+".crt"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	return ca, key
}

func writeClientCert(t *testing.T, dir, name, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, name+".crt"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	write(t, filepath.Join(dir, name+".key"), string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
