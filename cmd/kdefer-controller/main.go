// Command kdefer-controller runs kdefer's controllers: it arms every managed
// pod, runs a defer pod on the same node when the pod ends, and releases the
// pod and its work volume afterwards.
//
// main parses flags, sets up logging and the client limits, and runs the
// manager package app builds; it holds no wiring or logic of its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zerologr"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/cmd/kdefer-controller/app"
	"github.com/kdefer/kdefer/controller"
	"github.com/kdefer/kdefer/internal/version"
	"github.com/kdefer/kdefer/stagecontract"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	if len(args) > 0 && args[0] == "node-agent" {
		return runNodeAgent(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "uninstall" {
		return runUninstall(ctx, args[1:])
	}
	fs := flag.NewFlagSet("kdefer-controller", flag.ContinueOnError)
	var (
		mo          app.ManagerOptions
		qps         float64
		burst       int
		pf          processFlags
		showVersion bool
	)
	fs.StringVar(&mo.MetricsAddr, "metrics-bind-address", ":8443", "address of the Prometheus /metrics endpoint (\"0\" disables it)")
	fs.BoolVar(&mo.MetricsInsecure, "metrics-insecure", false, "serve /metrics over plain HTTP without authentication (default: HTTPS, to bearer tokens allowed GET /metrics, e.g. by ClusterRole kdefer-metrics-reader)")
	fs.StringVar(&mo.MetricsCertDir, "metrics-cert-dir", "", "directory of the metrics server's tls.crt and tls.key (default: a self-signed certificate)")
	fs.StringVar(&mo.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (\"0\" disables them)")
	fs.BoolVar(&mo.LeaderElection, "leader-elect", true, "elect a leader among replicas (Lease "+app.LeaderElectionID+")")
	fs.StringVar(&mo.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: the pod's namespace)")
	fs.Float64Var(&qps, "kube-api-qps", app.DefaultKubeAPIQPS, "client-side QPS limit towards the apiserver (0: none; API Priority and Fairness still applies)")
	fs.IntVar(&burst, "kube-api-burst", app.DefaultKubeAPIBurst, "client-side burst towards the apiserver")
	fs.StringVar(&mo.DeferPod.StageImage, "stage-image", v1.DefaultStageImage(), "image of kdefer-stage for stage-out steps")
	fs.DurationVar(&mo.DeferPod.MaxDeadline, "max-deadline", app.DefaultMaxDeadline, "cap on every defer run's deadline, whatever a DeferPolicy or Job annotation asks (0: no cap); a defer pod makes kubectl drain wait at most this long")
	fs.StringVar(&mo.DeferPod.PriorityClassName, "defer-priority-class", controller.DefaultDeferPriorityClass, "priority class of defer pods whose DeferPolicy names none (\"\": none); a critical class is what the kubelet admits under disk pressure")
	mo.DeferPod.DeferContainerLimits = controller.DefaultDeferContainerLimits.DeepCopy()
	for _, r := range []corev1.ResourceName{corev1.ResourceMemory, corev1.ResourceCPU} {
		def := mo.DeferPod.DeferContainerLimits[r]
		fs.Func("defer-container-"+string(r)+"-limit", "the "+string(r)+" limit of a user defer container that sets none (default "+def.String()+")", func(v string) error {
			q, err := resource.ParseQuantity(v)
			if err != nil || q.Sign() <= 0 {
				return fmt.Errorf("want a positive quantity, got %q", v)
			}
			mo.DeferPod.DeferContainerLimits[r] = q
			return nil
		})
	}
	fs.IntVar(&mo.Workers, "workers", 32, "concurrent reconciles per controller")
	prePull := fs.Bool("pre-pull", true, "pull the stage image on the nodes of armed pods (policies can opt out with prePull: false)")
	pf.add(fs)
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	mo.Webhook.AddFlags(fs)
	fs.StringVar(&mo.LogsURL, "logs-url", "", "URL defer pods fetch an ended pod's logs from when no node agent runs (default https://"+app.LogsService+".NAMESPACE.svc"+stagecontract.LogsPath+")")
	fs.IntVar(&mo.NodeAgentPort, "node-agent-port", 0, "port of kdefer's node agent (kdefer-controller node-agent) on every node: defer pods fetch the ended pod's logs from it (0: from this controller, through the apiserver)")
	fs.StringVar(&mo.NodeAgentNamespace, "node-agent-namespace", "kdefer-node", "namespace of the node agents and their certificate Secret "+app.NodeAgentCertSecret)
	fs.StringVar(&mo.NodeAgentCertDir, "node-agent-cert-dir", "", "directory the node agents' certificate is written to (default $TMPDIR/kdefer-node-certs)")
	fs.Var(&mo.Namespaces, "namespaces", "the only namespaces whose Jobs and pods kdefer serves, comma-separated (default: every namespace); the chart's watchNamespaces")
	fs.StringVar(&mo.LogsBindAddress, "logs-bind-address", app.DefaultLogsBindAddress, "host:port the controller's logs endpoint listens on when no node agent runs, with the webhook's certificate (never on the webhook server, which only the apiserver needs to reach)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	mo.NoPrePull = !*prePull
	if showVersion {
		fmt.Println(version.Version)
		return 0
	}
	log, cfg, code := pf.setup()
	if code != 0 {
		return code
	}
	app.ClientLimits(cfg, qps, burst)
	cfg.UserAgent = "kdefer-controller/" + version.Version

	mgr, err := app.NewManager(ctx, cfg, mo)
	if err != nil {
		log.Error(err, "creating manager")
		return 1
	}
	log.Info("starting manager", "version", version.Version, "stageImage", mo.DeferPod.StageImage, "leaderElection", mo.LeaderElection, "namespaces", mo.Namespaces.String())
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "running manager")
		return 1
	}
	return 0
}

// processFlags are the flags of every subcommand: how it logs and which
// cluster it talks to.
type processFlags struct{ logLevel, logFormat, kubeconfig string }

func (p *processFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&p.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&p.logFormat, "log-format", "json", "json or console")
	fs.StringVar(&p.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG)")
}

// parseFlags parses args; when it returns false, the command exits with
// code (0 after -help, 2 after a bad flag, which fs reported).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

// setup makes the logger (also controller-runtime's) and reads the
// kubeconfig; a non-zero code is the exit code, after it said why.
func (p *processFlags) setup() (logr.Logger, *rest.Config, int) {
	logLevel, logFormat, kubeconfig := p.logLevel, p.logFormat, p.kubeconfig
	lvl, err := zerolog.ParseLevel(logLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "--log-level: %v\n", err)
		return logr.Logger{}, nil, 2
	}
	var out = zerolog.New(os.Stderr)
	if logFormat == "console" {
		out = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.RFC3339})
	}
	zl := out.Level(lvl).With().Timestamp().Logger()
	zerologr.VerbosityFieldName = "v"
	log := zerologr.New(&zl)
	ctrl.SetLogger(log)
	if kubeconfig != "" {
		os.Setenv("KUBECONFIG", kubeconfig)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "load the kubeconfig")
		return log, nil, 1
	}
	return log, cfg, 0
}

// runNodeAgent runs kdefer's node agent (app.RunNodeAgent).
func runNodeAgent(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("kdefer-controller node-agent", flag.ContinueOnError)
	var o app.NodeAgentOptions
	var pf processFlags
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.BindAddress, "bind-address", "", "host:port of the logs endpoint, on the node's address")
	fs.StringVar(&o.CertDir, "cert-dir", "/var/run/kdefer/node-cert", "directory of the serving tls.crt and tls.key (Secret "+app.NodeAgentCertSecret+")")
	fs.StringVar(&o.PodLogsDir, "pod-logs-dir", "/host/var/log/pods", "the kubelet's podLogsDir, as mounted")
	fs.StringVar(&o.SpoolDir, "spool-dir", "/host/var/log/kdefer", "where kept logs are hard-linked: on the same mount as --pod-logs-dir")
	fs.Var(&o.Namespaces, "namespaces", "the only namespaces whose pods' logs the agent keeps and serves, comma-separated (default: every namespace); the controller's --namespaces")
	pf.add(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	log, cfg, code := pf.setup()
	if code != 0 {
		return code
	}
	cfg.UserAgent = "kdefer-node-agent/" + version.Version
	o.Log = log
	if err := app.RunNodeAgent(ctx, cfg, o); err != nil {
		log.Error(err, "run the node agent")
		return 1
	}
	return 0
}
