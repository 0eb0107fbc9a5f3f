package main

import (
	"context"
	"flag"
	"os"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kdefer/kdefer/api/scheme"
	"github.com/kdefer/kdefer/internal/version"
	"github.com/kdefer/kdefer/uninstall"
)

// runUninstall is the chart's pre-delete hook (templates/uninstall.yaml):
// uninstall.Run against the release's controller, so that `helm uninstall`
// leaves no pod held by kdefer's finalizer.
func runUninstall(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("kdefer-controller uninstall", flag.ContinueOnError)
	var o uninstall.Options
	var logLevel, logFormat, kubeconfig string
	fs.DurationVar(&o.Wait, "wait", uninstall.DefaultWait, "how long to wait for runs in flight (their pod ended, their stage-out not finished) before stopping the controller; 0: no wait")
	fs.StringVar(&o.Namespace, "controller-namespace", envOr("POD_NAMESPACE", "kdefer-system"), "namespace of the controller's Deployment (default $POD_NAMESPACE, else kdefer-system)")
	fs.StringVar(&o.Deployment, "controller-deployment", "kdefer-controller", "name of the controller's Deployment")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "json", "json or console")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	log, cfg, code := setup(logLevel, logFormat, kubeconfig)
	if code != 0 {
		return code
	}
	cfg.UserAgent = "kdefer-uninstall/" + version.Version
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		log.Error(err, "create the client")
		return 1
	}
	o.Log = log
	if _, err := uninstall.Run(ctx, c, o); err != nil {
		log.Error(err, "uninstall kdefer")
		return 1
	}
	return 0
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
