// Package app wires kdefer-controller: one manager with kdefer's
// controllers (package controller) and its admission webhooks (package
// controller/webhook, with their certificates) side by side, health and
// readiness probes, metrics and leader election. It owns the wiring and
// nothing else: no reconcile or admission logic lives here. The
// kdefer-controller binary and the controller benchmark build their manager
// with NewManager.
package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kdefer/kdefer/api/scheme"
	"github.com/kdefer/kdefer/controller"
	"github.com/kdefer/kdefer/controller/certs"
	"github.com/kdefer/kdefer/controller/logsendpoint"
	"github.com/kdefer/kdefer/controller/webhook"
	"github.com/kdefer/kdefer/stagecontract"
)

// ManagerOptions configure the manager that runs kdefer's controllers and
// webhooks.
type ManagerOptions struct {
	controller.Options
	MetricsAddr string // "0" disables
	// MetricsInsecure serves /metrics over plain HTTP to anyone who can
	// reach it; by default it is HTTPS, to bearer tokens the apiserver
	// authenticates and authorizes for GET /metrics (SecureMetrics).
	MetricsInsecure bool
	// MetricsCertDir holds the metrics server's tls.crt and tls.key
	// (default: a self-signed certificate made at start).
	MetricsCertDir          string
	ProbeAddr               string // "0" disables
	LeaderElection          bool
	LeaderElectionNamespace string
	// NewClient wraps the manager's client (tests count writes with it).
	NewClient client.NewClientFunc
	// Webhook configures the admission webhooks served by the same manager
	// (Disabled in the envtest suites of the controllers).
	Webhook webhook.Options
	// LogsURL is the URL defer pods fetch an ended pod's logs from
	// (default: the logs Service's, LogsService, path
	// stagecontract.LogsPath).
	LogsURL string
	// LogsBindAddress (host:port, default DefaultLogsBindAddress) is the
	// logs endpoint's own listener, with the webhook's certificate. It is
	// never the webhook server: every pod may reach the logs endpoint,
	// only the apiserver the webhooks, and each port can be closed apart.
	LogsBindAddress string
	// NodeAgentPort, when set, is the port of kdefer's node agent on every
	// node (kdefer-controller node-agent): defer pods fetch the ended pod's
	// logs there, from its node, instead of from the controller's
	// endpoint, which reads them through the apiserver and loses them to
	// the kubelet when the pod was deleted or evicted.
	NodeAgentPort int
	// NodeAgentCertDir is where the controller writes the node agents'
	// certificate (Secret NodeAgentCertSecret), whose ca.crt defer pods
	// trust.
	NodeAgentCertDir string
	// NodeAgentNamespace is the node agents' (default kdefer-node), where
	// their certificate Secret is.
	NodeAgentNamespace string
	// Namespaces, when set, are the only namespaces whose Jobs, pods and
	// runs kdefer sees (a namespaced install; empty: every namespace).
	Namespaces Namespaces
}

// NodeAgentCertSecret holds the node agents' serving certificate, made by
// the controller with a CA of its own (the agents never hold the webhook's
// key).
const NodeAgentCertSecret = "kdefer-node-cert"

// NodeAgentService names the node agents' certificate: they are reached
// at node addresses, so the certificate names this and clients check it.
const NodeAgentService = "kdefer-node"

// LogsService is the Service of the controller's logs endpoint (served
// when no node agent runs), port 443 to LogsBindAddress' port.
const LogsService = "kdefer-logs"

// DefaultLogsBindAddress is where the controller's logs endpoint listens.
const DefaultLogsBindAddress = ":9444"

// LeaderElectionID is the Lease kdefer's replicas elect a leader with.
const LeaderElectionID = "kdefer-controller.kdefer.io"

// LeaderPodLabel is the Lease's label that names the pod of the replica
// that leads (its POD_NAME, from the downward API). The Lease's
// holderIdentity is the host name and a random suffix, which names no pod:
// a host-network replica's host name is its node's, and nodes may share one.
const LeaderPodLabel = "kdefer.io/leader-pod"

// leaderLabels is what the leading replica writes on the Lease.
func leaderLabels() map[string]string {
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return map[string]string{LeaderPodLabel: pod}
	}
	return nil
}

// The manager's client-side limits towards the apiserver by default
// (kdefer-controller --kube-api-qps, --kube-api-burst; the benchmark uses
// them too). A burst of pod ends is a burst of defer pod creations, one
// write each: the bucket lets 1,000 of them go at once, then 500 a second;
// at 50 a second the 1,000th defer pod would wait ~18 s. The apiserver's
// API Priority and Fairness protects it beyond that.
const (
	DefaultKubeAPIQPS   = 500
	DefaultKubeAPIBurst = 1000
)

// DefaultMaxDeadline caps every defer run's deadline by default
// (kdefer-controller --max-deadline): a defer pod holds its node's drain for
// as long as its run may last, so no policy or Job annotation gets more than
// a working day without the cluster's operator saying so.
const DefaultMaxDeadline = 24 * time.Hour

// ClientLimits sets the client-side limits of cfg: qps 0 or below means
// none (API Priority and Fairness on the server still applies).
func ClientLimits(cfg *rest.Config, qps float64, burst int) {
	if qps <= 0 {
		cfg.QPS, cfg.Burst = -1, 0
		return
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
}

// MetricsOptions are the metrics server's options: unless MetricsInsecure,
// HTTPS (HTTP/1.1 only: HTTP/2 is off, as kubebuilder scaffolds, against its
// stream-reset and rapid-reset attacks) behind controller-runtime's
// authentication and authorization filter, which asks the apiserver
// (TokenReview, SubjectAccessReview) about each request's bearer token; a
// scraper needs GET on the non-resource URL /metrics (deploy/rbac's
// kdefer-metrics-reader).
func MetricsOptions(mo ManagerOptions) metricsserver.Options {
	o := metricsserver.Options{BindAddress: mo.MetricsAddr}
	if mo.MetricsInsecure {
		return o
	}
	o.SecureServing = true
	o.FilterProvider = filters.WithAuthenticationAndAuthorization
	o.CertDir = mo.MetricsCertDir
	o.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	return o
}

// NewManager builds a manager with label-scoped caches, the field indexes
// (registered before it starts), kdefer's controllers and, unless disabled,
// its admission webhooks.
func NewManager(ctx context.Context, cfg *rest.Config, mo ManagerOptions) (ctrl.Manager, error) {
	opts := ctrl.Options{
		Scheme:                        scheme.New(),
		Cache:                         mo.Namespaces.scope(controller.CacheOptions()),
		Metrics:                       MetricsOptions(mo),
		HealthProbeBindAddress:        mo.ProbeAddr,
		LeaderElection:                mo.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       mo.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaderElectionLabels:          leaderLabels(),
		GracefulShutdownTimeout:       ptr.To(10 * time.Second),
		Controller:                    config.Controller{SkipNameValidation: ptr.To(true)},
		NewClient:                     mo.NewClient,
	}
	if mo.Webhook.Render.StageImage == "" {
		mo.Webhook.Render.StageImage = mo.DeferPod.StageImage
	}
	if !mo.Webhook.Disabled {
		srv, err := webhook.NewServer(mo.Webhook)
		if err != nil {
			return nil, err
		}
		opts.WebhookServer = srv
	}
	if opts.HealthProbeBindAddress == "0" {
		opts.HealthProbeBindAddress = ""
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	if opts.HealthProbeBindAddress != "" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(req.Context()) {
				return fmt.Errorf("caches not synced")
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if err := webhook.SetupWithManager(mgr, mo.Webhook); err != nil {
		return nil, fmt.Errorf("setting up the webhooks: %w", err)
	}
	if !mo.Webhook.Disabled {
		(&webhook.PVCArmer{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}).Register(mgr.GetWebhookServer())
	}
	if !mo.Webhook.Disabled {
		if mo.DeferPod.Logs, err = setupLogs(cfg, mgr, mo); err != nil {
			return nil, err
		}
	}
	mo.Platform = controller.PlatformOptions{Namespace: mo.Webhook.Namespace(), Served: mo.Namespaces}
	if err := controller.SetupWithManager(ctx, mgr, mo.Options); err != nil {
		return nil, fmt.Errorf("setting up the controllers: %w", err)
	}
	return mgr, nil
}

// setupLogs returns where defer pods reach the logs endpoint: the node
// agent on their node when one runs (mo.NodeAgentPort), else the
// controller's own, which it serves on a listener of its own
// (mo.LogsBindAddress), never on the webhook server.
func setupLogs(cfg *rest.Config, mgr ctrl.Manager, mo ManagerOptions) (controller.LogsEndpoint, error) {
	if mo.NodeAgentPort != 0 {
		return setupNodeAgentLogs(mgr, mo)
	}
	ls, err := newLogServer(cfg, mgr)
	if err != nil {
		return controller.LogsEndpoint{}, err
	}
	addr := mo.LogsBindAddress
	if addr == "" {
		addr = DefaultLogsBindAddress
	}
	h, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil {
		return controller.LogsEndpoint{}, fmt.Errorf("--logs-bind-address %q: want host:port, e.g. %s", addr, DefaultLogsBindAddress)
	}
	// The webhook server's certificate (it names the webhook Service,
	// which defer pods check it for: ServerName below), not its client
	// authentication: defer pods present a token, not a certificate.
	host, caFile := mo.Webhook.Endpoint()
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: h, Port: port, CertDir: filepath.Dir(caFile)})
	if err := mgr.Add(srv); err != nil {
		return controller.LogsEndpoint{}, fmt.Errorf("add the logs server: %w", err)
	}
	srv.Register(stagecontract.LogsPath, ls)
	url := mo.LogsURL
	if url == "" {
		url = "https://" + LogsService + "." + mo.Webhook.Namespace() + ".svc" + stagecontract.LogsPath
	}
	return controller.LogsEndpoint{URL: url, ServerName: host, CA: readCA(caFile)}, nil
}

// The node agents' serving certificate Secret, in their namespace: a Role
// of deploy/node-agent/role.yaml (generated with the agents' ClusterRole
// from this package's markers, so it goes with the agents), bound to the
// controller. As for the webhook's (package certs): create here, which
// RBAC cannot limit by name; get and update of NodeAgentCertSecret alone
// in deploy/node-agent/cert_role.yaml, by hand (resourceNames).
// +kubebuilder:rbac:groups="",namespace=kdefer-node,resources=secrets,verbs=create

// setupNodeAgentLogs points defer pods at the node agent on their node
// and keeps the agents' certificate current.
func setupNodeAgentLogs(mgr ctrl.Manager, mo ManagerOptions) (controller.LogsEndpoint, error) {
	ns := mo.NodeAgentNamespace
	if ns == "" {
		ns = "kdefer-node"
	}
	dir := mo.NodeAgentCertDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "kdefer-node-certs")
	}
	// kdefer's own CA in either certificate mode: a certificate for a
	// name no Service has, checked by kdefer's stage steps only.
	err := certs.Setup(mgr, certs.Options{Namespace: ns, SecretName: NodeAgentCertSecret, ServiceName: NodeAgentService,
		CertDir: dir, MutatingWebhooks: []string{}, ValidatingWebhooks: []string{}})
	if err != nil {
		return controller.LogsEndpoint{}, fmt.Errorf("set up the node agents' certificate: %w", err)
	}
	url := mo.LogsURL
	if url == "" {
		url = controller.NodeAgentURL(mo.NodeAgentPort)
	}
	return controller.LogsEndpoint{URL: url, ServerName: NodeAgentService + "." + ns + ".svc",
		CA: readCA(filepath.Join(dir, certs.CACertKey))}, nil
}

// readCA reads the logs endpoint's CA when a defer pod is built, so a
// rotated CA reaches new pods.
func readCA(file string) func() []byte {
	return func() []byte {
		ca, err := os.ReadFile(file)
		if err != nil {
			ctrl.Log.WithName("logs").Error(err, "read the logs endpoint's CA: defer pods archive no logs")
		}
		return ca
	}
}

// newLogServer is the logs endpoint: TokenReviews with the manager's
// client, pods and runs read uncached, logs from a clientset (the
// controller-runtime client cannot stream a subresource).
func newLogServer(cfg *rest.Config, mgr ctrl.Manager) (*logsendpoint.Server, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("make the logs endpoint's clientset: %w", err)
	}
	return &logsendpoint.Server{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Log: ctrl.Log.WithName("logs"),
		Source: logsendpoint.APISource{Logs: func(ctx context.Context, ns, pod string, o *corev1.PodLogOptions) (io.ReadCloser, error) {
			return cs.CoreV1().Pods(ns).GetLogs(pod, o).Stream(ctx)
		}}}, nil
}
