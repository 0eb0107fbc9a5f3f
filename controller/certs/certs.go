// Package certs keeps the webhook server's TLS material without cert-manager:
// a self-signed CA and a serving certificate for the webhook Service, stored
// in a Secret (shared by every replica), written to the webhook server's
// certificate directory (which it watches and reloads), and the CA bundle
// patched into kdefer's webhook configurations. Certificates are rotated
// well before they expire; while a CA is replaced, the bundle holds the old
// and the new CA so no request fails during the switch. It knows nothing of
// kdefer's objects and must not import the other kdefer packages.
package certs

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Secret keys.
const (
	CACertKey  = "ca.crt" // every CA the bundle trusts, current first
	CAKeyKey   = "ca.key"
	CertKey    = corev1.TLSCertKey
	PrivKeyKey = corev1.TLSPrivateKeyKey
)

// Options configure the certificates. Zero values take the defaults.
type Options struct {
	// Namespace of the Secret and the webhook Service (default kdefer-system).
	Namespace string
	// SecretName holds the CA and serving certificate (default kdefer-webhook-cert).
	SecretName string
	// ServiceName of the webhook Service (default kdefer-webhook).
	ServiceName string
	// DNSNames added to the Service's names (e.g. for a webhook reached by
	// URL on a local cluster); IPs may be given as well.
	DNSNames []string
	// CertDir is the webhook server's certificate directory (default
	// the controller-runtime default, $TMPDIR/k8s-webhook-server/serving-certs).
	CertDir string
	// MutatingWebhooks and ValidatingWebhooks are the names of the webhook
	// configurations whose caBundle is kept current (default "kdefer").
	MutatingWebhooks   []string
	ValidatingWebhooks []string
	// CAValidity and CertValidity (default 10 years and 1 year). A
	// certificate is renewed when less than a third of its validity is left.
	CAValidity, CertValidity time.Duration
	// CheckInterval between checks of the Secret, files and bundles (default 10m).
	CheckInterval time.Duration
	// Clock (tests).
	Clock clock.WithTicker
}

// AddFlags registers the options as command-line flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Namespace, "webhook-cert-namespace", "kdefer-system", "namespace of the webhook Service and certificate Secret")
	fs.StringVar(&o.SecretName, "webhook-cert-secret", "kdefer-webhook-cert", "Secret holding the webhook CA and serving certificate")
	fs.StringVar(&o.ServiceName, "webhook-service", "kdefer-webhook", "name of the webhook Service")
	fs.Func("webhook-cert-dns-name", "extra DNS name or IP of the serving certificate (repeatable)", func(s string) error {
		o.DNSNames = append(o.DNSNames, s)
		return nil
	})
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = "kdefer-system"
	}
	if o.SecretName == "" {
		o.SecretName = "kdefer-webhook-cert"
	}
	if o.ServiceName == "" {
		o.ServiceName = "kdefer-webhook"
	}
	if o.CertDir == "" {
		o.CertDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	}
	if o.MutatingWebhooks == nil {
		o.MutatingWebhooks = []string{"kdefer"}
	}
	if o.ValidatingWebhooks == nil {
		o.ValidatingWebhooks = []string{"kdefer"}
	}
	if o.CAValidity == 0 {
		o.CAValidity = 10 * 365 * 24 * time.Hour
	}
	if o.CertValidity == 0 {
		o.CertValidity = 365 * 24 * time.Hour
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = 10 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// DNSNamesFor returns the names the serving certificate is valid for.
func (o Options) dnsNames() []string {
	s, ns := o.ServiceName, o.Namespace
	names := []string{s, s + "." + ns, s + "." + ns + ".svc", s + "." + ns + ".svc.cluster.local"}
	return append(names, o.DNSNames...)
}

// The certificate Secret is read and updated by name (Get, then Update
// with its resourceVersion; no list or watch) and created when missing.
// The marker grants create only, which RBAC cannot limit by name (the name
// is in the request's body, not its URL); get and update are limited to
// the Secret's default name by deploy/rbac/webhook_cert_role.yaml, written
// by hand since markers cannot say resourceNames.
// +kubebuilder:rbac:groups="",namespace=kdefer-system,resources=secrets,verbs=create
//
// The webhook configurations are read and updated by name only (no list or
// watch): deploy/rbac/webhook_configurations_role.yaml grants get and update
// on the default names, by resourceNames, which RBAC markers cannot say
// (TestWebhookConfigurationRBAC keeps it in line with the defaults).

// Rotator keeps the certificates current. It runs on every replica (no
// leader election): each writes its own certificate directory.
type Rotator struct {
	c    client.Client
	opts Options
	log  logr.Logger
}

// New returns a Rotator. c must read without a cache (its first Ensure runs
// before the manager's caches start).
func New(c client.Client, opts Options, log logr.Logger) *Rotator {
	return &Rotator{c: c, opts: opts.withDefaults(), log: log}
}

// Setup ensures the certificates once, synchronously (so the webhook server
// finds them when the manager starts it), and adds a Rotator to the manager
// that keeps them current. The webhook server must use opts.CertDir.
func Setup(mgr ctrl.Manager, opts Options) error {
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return err
	}
	r := New(c, opts, mgr.GetLogger().WithName("certs"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Ensure(ctx); err != nil {
		return fmt.Errorf("setting up webhook certificates: %w", err)
	}
	return mgr.Add(r)
}

// NeedLeaderElection is false: every replica needs the files.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Start checks periodically until ctx ends.
func (r *Rotator) Start(ctx context.Context) error {
	t := r.opts.Clock.NewTicker(r.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			if err := r.Ensure(ctx); err != nil {
				r.log.Error(err, "failed to refresh webhook certificates")
			}
		}
	}
}

// Ensure brings the Secret, the certificate files and the CA bundles up to
// date.
func (r *Rotator) Ensure(ctx context.Context) error {
	var data map[string][]byte
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		var err error
		data, err = r.ensureSecret(ctx)
		return err
	})
	if err != nil {
		return err
	}
	if err := r.writeFiles(data); err != nil {
		return err
	}
	return r.patchBundles(ctx, data[CACertKey])
}

func (r *Rotator) ensureSecret(ctx context.Context) (map[string][]byte, error) {
	key := client.ObjectKey{Namespace: r.opts.Namespace, Name: r.opts.SecretName}
	sec := &corev1.Secret{}
	err := r.c.Get(ctx, key, sec)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	data, changed, err := Renew(sec.Data, r.opts.dnsNames(), r.opts.Clock.Now(), r.opts.CAValidity, r.opts.CertValidity)
	if err != nil {
		return nil, err
	}
	if !changed {
		return data, nil
	}
	sec.Data = data
	sec.Type = corev1.SecretTypeOpaque
	if exists {
		r.log.Info("renewed webhook certificates", "secret", key.String())
		return data, r.c.Update(ctx, sec)
	}
	sec.ObjectMeta = metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
		Labels: map[string]string{"app.kubernetes.io/name": "kdefer", "app.kubernetes.io/component": "webhook-cert"}}
	r.log.Info("created webhook certificates", "secret", key.String())
	return data, r.c.Create(ctx, sec)
}

func (r *Rotator) writeFiles(data map[string][]byte) error {
	if err := os.MkdirAll(r.opts.CertDir, 0o700); err != nil {
		return err
	}
	// Key first: the server reloads when the certificate changes. The CA
	// bundle is for clients that are not the apiserver (defer pods fetching
	// logs, controller.LogsEndpoint).
	for _, k := range []string{PrivKeyKey, CertKey, CACertKey} {
		p := filepath.Join(r.opts.CertDir, k)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data[k]) {
			continue
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, data[k], 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
	}
	return nil
}

func (r *Rotator) patchBundles(ctx context.Context, bundle []byte) error {
	var objs []client.Object
	for _, name := range r.opts.MutatingWebhooks {
		objs = append(objs, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	for _, name := range r.opts.ValidatingWebhooks {
		objs = append(objs, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	var errs []error
	for _, obj := range objs {
		errs = append(errs, r.patchBundle(ctx, obj, bundle))
	}
	return errors.Join(errs...)
}

// clientConfigs points at the client config of every webhook of a
// mutating or validating webhook configuration: the two kinds hold their
// webhooks in different types with the same ClientConfig field.
func clientConfigs(obj client.Object) []*admissionregistrationv1.WebhookClientConfig {
	var cfgs []*admissionregistrationv1.WebhookClientConfig
	switch wc := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i := range wc.Webhooks {
			cfgs = append(cfgs, &wc.Webhooks[i].ClientConfig)
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for i := range wc.Webhooks {
			cfgs = append(cfgs, &wc.Webhooks[i].ClientConfig)
		}
	}
	return cfgs
}

// patchBundle sets bundle as the caBundle of every webhook of the webhook
// configuration named by obj (read into obj; a missing one is left alone).
func (r *Rotator) patchBundle(ctx context.Context, obj client.Object, bundle []byte) error {
	name := obj.GetName()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.c.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			return client.IgnoreNotFound(err)
		}
		changed := false
		for _, cc := range clientConfigs(obj) {
			if !bytes.Equal(cc.CABundle, bundle) {
				cc.CABundle = bundle
				changed = true
			}
		}
		if !changed {
			return nil
		}
		r.log.Info("patched ca bundle", "kind", fmt.Sprintf("%T", obj), "name", name)
		return r.c.Update(ctx, obj)
	})
}
