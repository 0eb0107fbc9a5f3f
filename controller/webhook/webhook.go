// Package webhook serves kdefer's admission webhooks: a mutating webhook that
// renders opted-in batch/v1 Jobs (see package render), one that renders
// opted-in pods no rendered template made (pod.go), a validating webhook
// that re-checks that an admitted Job is rendered (another mutating webhook
// may have run after kdefer's), one that checks opted-in CronJob templates
// as the Jobs they will make (cronjob.go), a validating webhook for
// DeferPolicies, and
// one that makes evictions of unfinished defer pods wait (eviction.go), and
// the PVC arming webhook (armpvc.go, registered by the caller: it is the
// controller's fast path, not a guard). SetupWithManager registers the rest
// on cmd/kdefer-controller's manager. It owns the admission protocol; what a
// rendered Job or an armed pod is belongs to packages render and
// controller, which must not import this one.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/certs"
	"github.com/kdefer/kdefer/controller/webhook/clientauth"
	"github.com/kdefer/kdefer/controller/webhook/review"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/resolve"
)

// Paths the webhooks are served at; deploy/webhook/webhooks.yaml uses them.
const (
	MutateJobPath      = "/mutate-batch-v1-job"
	ValidateJobPath    = "/validate-batch-v1-job"
	ValidatePolicyPath = "/validate-kdefer-io-v1alpha1-deferpolicy"
)

// Certificate modes.
const (
	// CertModeSelfSigned: kdefer generates and rotates its own CA and
	// serving certificate (package certs).
	CertModeSelfSigned = "self-signed"
	// CertModeExternal: another party (cert-manager) writes the files into
	// CertDir and injects the CA bundle.
	CertModeExternal = "external"
)

// Options configure the webhooks and their server.
type Options struct {
	// Disabled turns the webhooks off (render with `kdefer render` then).
	Disabled bool
	// Host the webhook server listens on (default: every address). A
	// host-network manager sets it, e.g. to 127.0.0.1, so nothing listens on
	// the node's other interfaces.
	Host string
	// Port the webhook server listens on (default 9443).
	Port int
	// CertDir holds tls.crt and tls.key (default the certs package's).
	CertDir string
	// CertMode is CertModeSelfSigned (default) or CertModeExternal.
	CertMode string
	// Certs configure self-signed certificates.
	Certs certs.Options
	// Render are render's settings (stage image, pull policy); the
	// controller's defer pods should use the same stage image.
	Render render.Options
	// Reader reads the DeferPolicies Jobs and pods name and lists a
	// namespace's default by resolve.IndexNamespaceDefault; default: the
	// manager's API reader (no cache, so a policy created just before its
	// Job is seen, see resolve.Cluster).
	Reader client.Reader
	// Cache reads the ClusterDeferPolicies and namespaces; default: the
	// manager's client, which reads its cache.
	Cache client.Reader
	// ClientAuth, when enabled, makes the webhooks answer only clients
	// with a certificate its CA signed: the apiserver.
	ClientAuth clientauth.Options
}

// AddFlags registers the options as flags (the stage image is set by the
// caller from its own --stage-image flag).
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Disabled, "disable-webhooks", false, "do not serve the admission webhooks")
	fs.StringVar(&o.Host, "webhook-bind-host", "", "address the admission webhook server listens on (default: every address)")
	fs.IntVar(&o.Port, "webhook-port", 9443, "port of the admission webhook server")
	fs.StringVar(&o.CertDir, "webhook-cert-dir", "", "directory of the webhook server's tls.crt and tls.key (default $TMPDIR/k8s-webhook-server/serving-certs)")
	fs.BoolVar(&o.Render.AllowFileURLs, "allow-file-urls", false, "accept file:// stage URLs (a directory of the node the stage step runs on; for single-node test clusters)")
	fs.StringVar(&o.CertMode, "webhook-cert-mode", CertModeSelfSigned, "self-signed (kdefer manages a CA, the serving certificate and the caBundles) or external (e.g. cert-manager)")
	fs.StringVar(&o.ClientAuth.CAFile, "webhook-client-ca-file", "", "PEM CA bundle: the webhooks answer only clients with a certificate it signed, as the apiserver presents through its admission configuration (default: any client)")
	fs.Func("webhook-client-name", "common name a webhook client certificate must have, with --webhook-client-ca-file (repeatable; default: any the CA signed)", func(s string) error {
		o.ClientAuth.Names = append(o.ClientAuth.Names, s)
		return nil
	})
	o.Certs.AddFlags(fs)
}

// Endpoint is how pods reach the webhook server: the webhook Service's
// in-cluster host (port 443), and the file of the CA that signs the
// server's certificate (ca.crt in the certificate directory, written by
// package certs or, with cert-manager, from its Secret).
func (o Options) Endpoint() (host, caFile string) {
	o = o.withDefaults()
	name := o.Certs.ServiceName
	if name == "" {
		name = "kdefer-webhook"
	}
	return name + "." + o.Namespace() + ".svc", filepath.Join(o.CertDir, certs.CACertKey)
}

// Namespace is kdefer's: its Services' and its certificate Secret's.
func (o Options) Namespace() string {
	if o.Certs.Namespace == "" {
		return "kdefer-system"
	}
	return o.Certs.Namespace
}

func (o Options) withDefaults() Options {
	if o.Port == 0 {
		o.Port = 9443
	}
	if o.CertMode == "" {
		o.CertMode = CertModeSelfSigned
	}
	if o.CertDir == "" {
		o.CertDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	}
	o.Certs.CertDir = o.CertDir
	return o
}

// NewServer returns the webhook server to put in ctrl.Options.WebhookServer;
// with opts.ClientAuth enabled, every handler registered on it answers only
// the clients it accepts.
func NewServer(opts Options) (webhook.Server, error) {
	opts = opts.withDefaults()
	so := webhook.Options{Host: opts.Host, Port: opts.Port, CertDir: opts.CertDir}
	if !opts.ClientAuth.Enabled() {
		return webhook.NewServer(so), nil
	}
	tlsOpt, err := opts.ClientAuth.TLSConfig()
	if err != nil {
		return nil, err
	}
	so.TLSOpts = append(so.TLSOpts, tlsOpt)
	return opts.ClientAuth.Server(webhook.NewServer(so)), nil
}

// +kubebuilder:rbac:groups=kdefer.io,resources=deferpolicies,verbs=get;list;watch

// SetupWithManager sets up the certificates (in self-signed mode) and
// registers the webhooks on the manager's webhook server, which must have
// been made by NewServer with the same options.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if opts.Disabled {
		return nil
	}
	opts = opts.withDefaults()
	switch opts.CertMode {
	case CertModeSelfSigned:
		if err := certs.Setup(mgr, opts.Certs); err != nil {
			return err
		}
	case CertModeExternal:
	default:
		return fmt.Errorf("webhook certificate mode %q: want %s or %s", opts.CertMode, CertModeSelfSigned, CertModeExternal)
	}
	if opts.Cache == nil {
		opts.Cache = mgr.GetClient()
	}
	Register(mgr.GetWebhookServer(), NewHandlers(opts, mgr.GetAPIReader()))
	return mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker())
}

// Register adds the handlers to a webhook server (tests use it directly).
func Register(srv webhook.Server, h *Handlers) {
	srv.Register(MutateJobPath, &webhook.Admission{Handler: admission.HandlerFunc(h.MutateJob)})
	srv.Register(ValidateJobPath, &webhook.Admission{Handler: admission.HandlerFunc(h.ValidateJob)})
	srv.Register(ValidateCronJobPath, &webhook.Admission{Handler: admission.HandlerFunc(h.ValidateCronJob)})
	srv.Register(MutatePodPath, &webhook.Admission{Handler: admission.HandlerFunc(h.MutatePod)})
	srv.Register(ValidatePolicyPath, &webhook.Admission{Handler: admission.HandlerFunc(h.ValidatePolicy)})
	srv.Register(ValidateEvictionPath, &webhook.Admission{Handler: admission.HandlerFunc(h.ValidateEviction)})
	srv.Register(ValidateClusterPolicyPath, &webhook.Admission{Handler: admission.HandlerFunc(h.ValidateClusterPolicy)})
	srv.Register(MutateNamespacePath, &webhook.Admission{Handler: admission.HandlerFunc(h.MutateNamespace)})
}

// Handlers are the webhooks' admission handlers.
type Handlers struct {
	opts          Options
	reader, cache client.Reader
}

// NewHandlers returns the handlers; reader is used when opts.Reader or
// opts.Cache is nil.
func NewHandlers(opts Options, reader client.Reader) *Handlers {
	h := &Handlers{opts: opts, reader: reader, cache: reader}
	if opts.Reader != nil {
		h.reader = opts.Reader
	}
	if opts.Cache != nil {
		h.cache = opts.Cache
	}
	return h
}

// policyFor returns the policy that applies to a Job, or a denial.
func (h *Handlers) policyFor(ctx context.Context, job *batchv1.Job) (resolve.Applied, *admission.Response) {
	return h.policyApplying(ctx, resolve.JobSubject(job), "kdefer cannot manage this Job")
}

// policyApplying returns the policy that applies to subject s (see
// resolve.Policy), or a denial that starts with intro.
func (h *Handlers) policyApplying(ctx context.Context, s resolve.Subject, intro string) (resolve.Applied, *admission.Response) {
	applied, err := h.resolvePolicy(ctx, s)
	if err != nil {
		r := policyDenial(s.Namespace, s.Named, intro, err)
		return resolve.Applied{}, &r
	}
	return applied, nil
}

// resolvePolicy is resolve.Policy on the cluster: a named policy and the
// namespace's default read by the API reader, the ClusterDeferPolicies and
// the namespace's labels through the cache.
func (h *Handlers) resolvePolicy(ctx context.Context, s resolve.Subject) (resolve.Applied, error) {
	return resolve.Policy(ctx, resolve.Cluster{Reader: h.reader, Cache: h.cache}, s)
}

// policyDenial is the response to an error of resolvePolicy: a denial
// for what the user can fix, else the API's error.
func policyDenial(ns, named, intro string, err error) admission.Response {
	var annErr *v1.AnnotationError
	var ambiguous *resolve.AmbiguousDefaultError
	var ambiguousCluster *resolve.AmbiguousClusterError
	switch {
	case apierrors.IsNotFound(err):
		return admission.Denied(policyMissing(ns, named))
	case errors.As(err, &annErr) || errors.As(err, &ambiguous) || errors.As(err, &ambiguousCluster):
		return denial(intro, err)
	default:
		return admission.Errored(http.StatusInternalServerError, err)
	}
}

func policyMissing(ns, name string) string {
	return fmt.Sprintf("annotation %s: DeferPolicy %q does not exist in namespace %q; fix: create it first (kubectl apply -f policy.yaml), or correct the annotation",
		v1.AnnotationPolicy, name, ns)
}

func denial(intro string, err error) admission.Response {
	problems := render.Problems(err)
	return admission.Denied(intro + ":\n- " + strings.Join(problems, "\n- "))
}

// MutateJob renders an opted-in Job.
func (h *Handlers) MutateJob(ctx context.Context, req admission.Request) admission.Response {
	log := logf.FromContext(ctx).WithValues("job", req.Namespace+"/"+review.Name(&req.AdmissionRequest))
	job, check, err := review.Job(&req.AdmissionRequest)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !check && !review.PlatformCandidate(&req.AdmissionRequest, job) {
		if review.LabelAdded(&req.AdmissionRequest, job) {
			return admission.Allowed("").WithWarnings(fmt.Sprintf("label %s was added to an existing Job: its pod template cannot change any more, so kdefer does not manage its pods; recreate the Job with the label (or pipe it through `kdefer render`)", v1.LabelEnabled))
		}
		return admission.Allowed("")
	}
	applied, deny := h.policyFor(ctx, job)
	if deny != nil {
		return *deny
	}
	// A new Job without kdefer's label is armed only if a
	// ClusterDeferPolicy selects it, and then labelled, so that it is
	// checked and watched as any opted-in Job.
	job, armed := resolve.MarkJob(job, applied)
	if !armed {
		return admission.Allowed("")
	}
	rendered, err := render.Job(job, applied.Spec(), h.opts.Render)
	if err != nil {
		log.V(1).Info("refused job", "problems", render.Problems(err))
		return denial("kdefer cannot manage this Job", err)
	}
	raw, err := json.Marshal(rendered)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	log.V(1).Info("rendered job", "operation", req.Operation)
	return admission.PatchResponseFromRaw(req.Object.Raw, raw).WithWarnings(render.Warnings(job)...)
}

// ValidateJob admits an opted-in Job only in its rendered form.
func (h *Handlers) ValidateJob(ctx context.Context, req admission.Request) admission.Response {
	job, check, err := review.Job(&req.AdmissionRequest)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !check {
		return admission.Allowed("")
	}
	applied, deny := h.policyFor(ctx, job)
	if deny != nil {
		return *deny
	}
	pol := applied.Spec()
	if _, err := render.Job(job, pol, h.opts.Render); err != nil {
		return denial("kdefer cannot manage this Job", err)
	}
	ok, why := render.IsRendered(job, pol, h.opts.Render)
	if got, want := job.Spec.Template.Annotations[v1.AnnotationClusterPolicy], applied.ClusterName(); ok && got != want {
		ok, why = false, fmt.Sprintf("annotation %s of the pod template is %q, but the ClusterDeferPolicy that applies is %q", v1.AnnotationClusterPolicy, got, want)
	}
	if !ok {
		logf.FromContext(ctx).Info("refused unrendered job", "job", req.Namespace+"/"+review.Name(&req.AdmissionRequest), "reason", why)
		return admission.Denied(fmt.Sprintf("the Job carries label %s=true but is not rendered by kdefer: %s; fix: make sure kdefer's mutating webhook runs for it (and that no later webhook undoes its changes), or render it with `kdefer render -f job.yaml`", v1.LabelEnabled, why))
	}
	return admission.Allowed("")
}

// ValidatePolicy checks a DeferPolicy with the same rules render applies to
// effective policies, beyond what the CRD's schema checks.
func (h *Handlers) ValidatePolicy(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	p, err := review.Policy(&req.AdmissionRequest)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	errs := v1.ValidateDeferPolicySpec(&p.Spec, field.NewPath("spec"))
	if !h.opts.Render.AllowFileURLs {
		errs = append(errs, v1.ValidateFileURLs(&p.Spec, field.NewPath("spec"))...)
	}
	if p.Spec.NamespaceDefault {
		other, err := h.otherDefault(ctx, req.Namespace, p.Name)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if other != "" {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "namespaceDefault"),
				fmt.Sprintf("DeferPolicy %s is already the default of namespace %s, and a namespace has at most one; fix: set namespaceDefault: false here, or first on %s (kubectl -n %s patch deferpolicy %s --type merge -p '{\"spec\":{\"namespaceDefault\":false}}')",
					other, req.Namespace, other, req.Namespace, other)))
		}
	}
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return admission.Denied(fmt.Sprintf("DeferPolicy %s is invalid:\n- %s", p.Name, strings.Join(msgs, "\n- ")))
	}
	return admission.Allowed("").WithWarnings(render.PolicyWarnings(&p.Spec)...)
}

// otherDefault names a default DeferPolicy of namespace ns other than
// name ("" if there is none), read as resolve.Policy reads it.
func (h *Handlers) otherDefault(ctx context.Context, ns, name string) (string, error) {
	defs, err := resolve.Cluster{Reader: h.reader, Cache: h.cache}.Defaults(ctx, ns)
	if err != nil {
		return "", fmt.Errorf("listing the default DeferPolicies of namespace %s: %w", ns, err)
	}
	for _, d := range defs {
		if d.Name != name {
			return d.Name, nil
		}
	}
	return "", nil
}
