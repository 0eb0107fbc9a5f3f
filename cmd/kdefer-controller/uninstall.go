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
	var pf processFlags
	fs.DurationVar(&o.Wait, "wait", uninstall.DefaultWait, "how long to wait for runs in flight (their pod ended, their stage-out not finished) before stopping the controller; 0: no wait")
	fs.StringVar(&o.Namespace, "controller-namespace", envOr("POD_NAMESPACE", "kdefer-system"), "namespace of the controller's Deployment (default $POD_NAMESPACE, else kdefer-system)")
	fs.StringVar(&o.Deployment, "controller-deployment", "kdefer-controller", "name of the controller's Deployment")
	pf.add(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	log, cfg, code := pf.setup()
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
