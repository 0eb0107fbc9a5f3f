// Package clientauth makes kdefer's admission webhooks answer only the
// apiserver: a client must present a certificate signed by a configured CA
// (and, optionally, with one of the configured common names), which
// kube-apiserver does when its admission configuration names a kubeconfig
// for kdefer's webhooks. Without it, any pod that reaches the webhook port
// could post a forged AdmissionReview for another namespace and read back
// what kdefer would render there (that namespace's policy: its URLs, its
// credentials Secret's name).
//
// The TLS layer verifies a certificate if one is given
// (tls.VerifyClientCertIfGiven) and the handlers refuse a request that gave
// none: a client without one gets a 403 that says what is missing, instead
// of a failed handshake, and controller-runtime's readiness check, which
// dials the webhook port without a certificate, keeps working.
package clientauth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"slices"

	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Options say which client certificates the webhooks accept.
type Options struct {
	// CAFile is the PEM bundle of the CAs that sign accepted client
	// certificates ("": no client authentication).
	CAFile string
	// Names are the accepted certificates' subject common names (none:
	// any certificate the CAs signed). Set them when the CA signs more
	// than the apiserver's (a cluster's own CA signs every kubelet's).
	Names []string
}

// Enabled says whether the webhooks require a client certificate.
func (o Options) Enabled() bool { return o.CAFile != "" }

// TLSConfig returns the server TLS option that verifies a client
// certificate against the CAs of o.CAFile when the client gives one; the
// error names the flag and what is wrong with the file.
func (o Options) TLSConfig() (func(*tls.Config), error) {
	pem, err := os.ReadFile(o.CAFile)
	if err != nil {
		return nil, fmt.Errorf("--webhook-client-ca-file: %w; fix: mount the CA bundle that signs the apiserver's webhook client certificate there", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--webhook-client-ca-file %s: holds no PEM certificate; fix: point it at the CA bundle (ca.crt) that signs the apiserver's webhook client certificate", o.CAFile)
	}
	return func(c *tls.Config) {
		c.ClientCAs = pool
		c.ClientAuth = tls.VerifyClientCertIfGiven
	}, nil
}

// Require wraps h so that it answers only a request whose connection
// presented a certificate the TLS layer verified (TLSConfig) and, if
// o.Names is set, whose common name is one of them; any other gets 403.
func (o Options) Require(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := o.refused(r); why != "" {
			logf.FromContext(r.Context()).V(1).Info("refuse webhook client", "remote", r.RemoteAddr, "path", r.URL.Path, "reason", why)
			http.Error(w, "kdefer's webhooks answer only the apiserver: "+why, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// refused says why r may not be answered ("" if it may).
func (o Options) refused(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "no client certificate signed by the webhook client CA"
	}
	if cn := r.TLS.VerifiedChains[0][0].Subject.CommonName; len(o.Names) > 0 && !slices.Contains(o.Names, cn) {
		return fmt.Sprintf("client certificate common name %q is not one of the accepted names", cn)
	}
	return ""
}

// Server wraps srv so that every handler registered on it is wrapped by
// Require: the webhooks and anything else served there.
func (o Options) Server(srv webhook.Server) webhook.Server {
	return server{Server: srv, opts: o}
}

type server struct {
	webhook.Server
	opts Options
}

func (s server) Register(path string, h http.Handler) {
	s.Server.Register(path, s.opts.Require(h))
}
