package clientauth

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTLSConfigRefusesBadCAFiles: a missing or non-PEM CA file stops the
// start, naming the flag and the fix.
func TestTLSConfigRefusesBadCAFiles(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(dir, "missing"), junk} {
		_, err := Options{CAFile: f}.TLSConfig()
		if err == nil || !strings.Contains(err.Error(), "--webhook-client-ca-file") || !strings.Contains(err.Error(), "fix:") {
			t.Errorf("%s: error %v, want one naming --webhook-client-ca-file and the fix", f, err)
		}
	}
}

// TestRequire: only a verified chain with an accepted name reaches the
// handler.
func TestRequire(t *testing.T) {
	chain := func(cn string) *tls.ConnectionState {
		return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn}}}}}
	}
	for _, tc := range []struct {
		name  string
		names []string
		state *tls.ConnectionState
		want  int
	}{
		{name: "plain HTTP", want: http.StatusForbidden},
		{name: "no certificate", state: &tls.ConnectionState{}, want: http.StatusForbidden},
		{name: "any name", state: chain("x"), want: http.StatusOK},
		{name: "accepted name", names: []string{"apiserver"}, state: chain("apiserver"), want: http.StatusOK},
		{name: "other name", names: []string{"apiserver"}, state: chain("system:node:n1"), want: http.StatusForbidden},
	} {
		h := Options{CAFile: "ca.crt", Names: tc.names}.Require(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		r := httptest.NewRequest(http.MethodPost, "/mutate-batch-v1-job", nil)
		r.TLS = tc.state
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s: %d, want %d (%s)", tc.name, w.Code, tc.want, w.Body)
		}
	}
}
