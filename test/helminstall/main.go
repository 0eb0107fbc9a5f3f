// Command helminstall is `helm upgrade --install` of kdefer's chart
// (deploy/helm/kdefer) through Helm's Go packages (helm.sh/helm/v4/pkg/action,
// the module kdefer's go.mod already has for test/helmchart), for the e2e
// harness (test/e2e/lib.sh deploy_kdefer_helm):
//
//	go run ./test/helminstall [-n kdefer-system] [--reuse-values] [-f VALUES.yaml]... [--set K=V]...
//	go run ./test/helminstall -uninstall [-save-values FILE] [-n kdefer-system]
//
// -uninstall is `helm uninstall` (hooks and all: the chart's pre-delete
// hook runs and is waited for); -save-values first writes the release's
// own values to FILE, so that an e2e scenario can install it again as it
// was with -f FILE.
//
// Why not the helm binary: building it compiles Helm's CLI, plugin runtime
// and every getter on top of these packages; the install itself is
// action.Install and action.Upgrade either way. The release is stored as
// Helm stores it (a Secret in the namespace), so `helm list`, `helm
// upgrade` and `helm uninstall` of any helm v4 see it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"github.com/kdefer/kdefer/test/repo"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var opts values.Options
	ns := flag.String("n", "kdefer-system", "namespace of the release (created when missing)")
	name := flag.String("name", "kdefer", "release name")
	chartDir := flag.String("chart", "deploy/helm/kdefer", "chart directory, relative to the repository")
	timeout := flag.Duration("timeout", 2*time.Minute, "bound on the install")
	flag.Var((*list)(&opts.ValueFiles), "f", "values file (repeatable)")
	flag.Var((*list)(&opts.Values), "set", "KEY=VALUE (repeatable, as helm --set)")
	flag.Var((*list)(&opts.JSONValues), "set-json", "KEY=JSON (repeatable, as helm --set-json: an empty list is [])")
	// An e2e scenario that changes one value of the installed release
	// (TestNamespacedInstall) keeps the others run.sh gave it: images,
	// local values, KDEFER_E2E_HELM_ARGS.
	reuse := flag.Bool("reuse-values", false, "upgrade: keep the release's values, -f and --set over them (as helm upgrade --reuse-values)")
	uninstall := flag.Bool("uninstall", false, "uninstall the release (helm uninstall) instead")
	saveValues := flag.String("save-values", "", "with -uninstall: first write the release's values (helm get values) to this file")
	flag.Parse()
	if *uninstall {
		if err := runUninstall(*name, *ns, *saveValues, *timeout); err != nil {
			fmt.Fprintf(os.Stderr, "helminstall: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*name, *ns, *chartDir, opts, *timeout, *reuse); err != nil {
		fmt.Fprintf(os.Stderr, "helminstall: %v\n", err)
		os.Exit(1)
	}
}

func run(name, ns, chartDir string, opts values.Options, timeout time.Duration, reuse bool) error {
	root, err := repo.Root()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(chartDir) {
		chartDir = filepath.Join(root, chartDir)
	}
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		return fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		return fmt.Errorf("values: %w", err)
	}
	cfg, err := configuration(ns)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	// upgrade --install: install unless the release exists.
	h := action.NewHistory(cfg)
	h.Max = 1
	_, err = h.Run(name)
	switch {
	case errors.Is(err, driver.ErrReleaseNotFound):
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace = name, ns
		// Helm stores the release in the namespace, so it must exist first;
		// the chart's own Namespace object (namespace.create) then adopts it.
		in.CreateNamespace, in.TakeOwnership = true, true
		in.WaitStrategy, in.Timeout = kube.HookOnlyStrategy, timeout
		if _, err := in.RunWithContext(ctx, ch, vals); err != nil {
			return fmt.Errorf("install %s: %w", name, err)
		}
		fmt.Printf("installed release %s in namespace %s\n", name, ns)
	case err != nil:
		return fmt.Errorf("history of %s: %w", name, err)
	default:
		up := action.NewUpgrade(cfg)
		up.Namespace, up.TakeOwnership, up.ReuseValues = ns, true, reuse
		up.WaitStrategy, up.Timeout = kube.HookOnlyStrategy, timeout
		if _, err := up.RunWithContext(ctx, name, ch, vals); err != nil {
			return fmt.Errorf("upgrade %s: %w", name, err)
		}
		fmt.Printf("upgraded release %s in namespace %s\n", name, ns)
	}
	return nil
}

func configuration(ns string) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(true)
	flags.Namespace = &ns
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := cfg.Init(flags, ns, "secret"); err != nil {
		return nil, fmt.Errorf("helm configuration: %w", err)
	}
	return cfg, nil
}

// runUninstall is helm uninstall of release name, hooks included, after
// saving its values to saveValues (if set).
func runUninstall(name, ns, saveValues string, timeout time.Duration) error {
	cfg, err := configuration(ns)
	if err != nil {
		return err
	}
	if saveValues != "" {
		vals, err := action.NewGetValues(cfg).Run(name)
		if err != nil {
			return fmt.Errorf("values of %s: %w", name, err)
		}
		data, err := yaml.Marshal(vals)
		if err != nil {
			return fmt.Errorf("values of %s: %w", name, err)
		}
		if err := os.WriteFile(saveValues, data, 0o644); err != nil {
			return err
		}
	}
	un := action.NewUninstall(cfg)
	un.WaitStrategy, un.Timeout = kube.HookOnlyStrategy, timeout
	res, err := un.Run(name)
	if err != nil {
		return fmt.Errorf("uninstall %s: %w", name, err)
	}
	if res != nil && res.Info != "" {
		fmt.Println(res.Info)
	}
	fmt.Printf("uninstalled release %s from namespace %s\n", name, ns)
	return nil
}
