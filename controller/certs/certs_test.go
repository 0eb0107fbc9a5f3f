package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestRotator(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kdefer"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "a.kdefer.io"}, {Name: "b.kdefer.io"}}}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kdefer"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "c.kdefer.io"}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(mwc, vwc).Build()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	dir := t.TempDir()
	r := New(c, Options{CertDir: dir, Clock: clk, DNSNames: []string{"127.0.0.1"}}, logr.Discard())
	ctx := context.Background()

	state := func() (ca []byte, cert *x509.Certificate) {
		t.Helper()
		sec := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-webhook-cert"}, sec); err != nil {
			t.Fatal(err)
		}
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
		if err != nil {
			t.Fatalf("files: %v", err)
		}
		cert, _ = x509.ParseCertificate(pair.Certificate[0])
		if string(sec.Data[CertKey]) != string(mustRead(t, filepath.Join(dir, "tls.crt"))) {
			t.Error("tls.crt on disk differs from the Secret")
		}
		// The bundle in every webhook verifies the serving certificate.
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(sec.Data[CACertKey])
		for _, name := range []string{"kdefer-webhook.kdefer-system.svc", "kdefer-webhook.kdefer-system.svc.cluster.local"} {
			if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: clk.Now()}); err != nil {
				t.Errorf("verify %s: %v", name, err)
			}
		}
		if len(cert.IPAddresses) != 1 || cert.IPAddresses[0].String() != "127.0.0.1" {
			t.Errorf("IP SANs %v", cert.IPAddresses)
		}
		_ = c.Get(ctx, client.ObjectKey{Name: "kdefer"}, mwc)
		_ = c.Get(ctx, client.ObjectKey{Name: "kdefer"}, vwc)
		for _, b := range [][]byte{mwc.Webhooks[0].ClientConfig.CABundle, mwc.Webhooks[1].ClientConfig.CABundle, vwc.Webhooks[0].ClientConfig.CABundle} {
			if string(b) != string(sec.Data[CACertKey]) {
				t.Error("a webhook's caBundle is not the Secret's ca.crt")
			}
		}
		return sec.Data[CACertKey], cert
	}

	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	ca1, cert1 := state()

	// Nothing to do a month later.
	clk.SetTime(start.Add(30 * 24 * time.Hour))
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	ca2, cert2 := state()
	if string(ca1) != string(ca2) || cert1.SerialNumber.Cmp(cert2.SerialNumber) != 0 {
		t.Error("certificates changed although still fresh")
	}

	// A drifted bundle (e.g. re-applied manifests) is repaired.
	mwc.Webhooks[0].ClientConfig.CABundle = nil
	if err := c.Update(ctx, mwc); err != nil {
		t.Fatal(err)
	}
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	state()

	// Nine months in, the serving certificate is renewed, the CA kept.
	clk.SetTime(start.Add(270 * 24 * time.Hour))
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	ca3, cert3 := state()
	if string(ca3) != string(ca1) || cert3.SerialNumber.Cmp(cert1.SerialNumber) == 0 {
		t.Error("serving certificate not renewed, or CA changed")
	}

	// Six and a half years in, a serving certificate from the first CA;
	// at 6.8 years the CA is renewed and the old one stays trusted.
	clk.SetTime(start.Add(65 * 365 * 24 * time.Hour / 10))
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	_, cert3 = state()
	clk.SetTime(start.Add(68 * 365 * 24 * time.Hour / 10))
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	ca4, _ := state()
	if n := len(parseCerts(ca4)); n != 2 {
		t.Errorf("bundle holds %d CAs, want the new and the old", n)
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(ca4) {
		t.Error("bundle unparseable")
	} else if _, err := cert3.Verify(x509.VerifyOptions{Roots: pool, DNSName: "kdefer-webhook.kdefer-system.svc", CurrentTime: clk.Now()}); err != nil {
		t.Errorf("the previous serving certificate is no longer trusted during the switch: %v", err)
	}
}

func TestRenewNewNames(t *testing.T) {
	now := time.Now()
	d1, _, err := Renew(nil, []string{"a"}, now, time.Hour*24*365, time.Hour*24*30)
	if err != nil {
		t.Fatal(err)
	}
	_, changed, _ := Renew(d1, []string{"a"}, now, time.Hour*24*365, time.Hour*24*30)
	if changed {
		t.Error("Renew changed fresh certificates")
	}
	d2, changed, _ := Renew(d1, []string{"a", "b"}, now, time.Hour*24*365, time.Hour*24*30)
	if !changed || string(d2[CACertKey]) != string(d1[CACertKey]) {
		t.Error("a new DNS name must renew the serving certificate only")
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
