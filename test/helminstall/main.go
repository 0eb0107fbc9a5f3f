// Command helminstall is `helm upgrade --install` of kdefer's chart
// (deploy/helm/kdefer) through Helm's Go packages (helm.sh/helm/v4/pkg/action,
// the module kdefer's go.mod already has for test/helmchart), for the e2e
// harness (test/e2e/lib.sh deploy_kdefer_helm):
//
//	go run ./test/helminstall [-n kdefer-system] [--chart DIR|oci://REPO --version V] [--reuse-values] [-f VALUES.yaml]... [--set K=V]...
//	go run ./test/helminstall -uninstall [-save-values FILE] [-n kdefer-system]
//	go run ./test/helminstall [-n kdefer-system] --rollback
//
// --chart oci://HOST/PATH/kdefer --version V installs a released chart
// pulled from a registry, as `helm install kdefer oci://… --version V`
// does (plain HTTP to a loopback or private address: the test registry).
// An upgrade with --reuse-values and no --chart keeps the release's own
// chart, as the release's values are kept. --rollback is `helm rollback
// kdefer`: back to the revision before the current one, its chart and values
// (the e2e upgrade scenario, TestUpgradeRollback).
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
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/registry"
	"helm.sh/helm/v4/pkg/release"
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
	chartDir := flag.String("chart", "deploy/helm/kdefer", "chart directory, relative to the repository, or oci://REPO (with --version)")
	version := flag.String("version", "", "with --chart oci://…: the chart's version")
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
	rollback := flag.Bool("rollback", false, "roll the release back to its previous revision (as helm rollback NAME)")
	flag.Parse()
	if *rollback {
		if err := rollBack(*name, *ns, *timeout); err != nil {
			fmt.Fprintf(os.Stderr, "helminstall: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *uninstall {
		if err := runUninstall(*name, *ns, *saveValues, *timeout); err != nil {
			fmt.Fprintf(os.Stderr, "helminstall: %v\n", err)
			os.Exit(1)
		}
		return
	}
	chartSet := false
	flag.Visit(func(f *flag.Flag) { chartSet = chartSet || f.Name == "chart" })
	if *reuse && !chartSet {
		*chartDir = "" // the release's own
	}
	if err := run(*name, *ns, *chartDir, *version, opts, *timeout, *reuse); err != nil {
		fmt.Fprintf(os.Stderr, "helminstall: %v\n", err)
		os.Exit(1)
	}
}

// loadChart is the chart at dir (relative to the repository) or, for
// oci://REF, version's pulled from the registry.
func loadChart(dir, version string) (*chart.Chart, error) {
	if ref, ok := strings.CutPrefix(dir, "oci://"); ok {
		if version == "" {
			return nil, fmt.Errorf("--chart %s: --version is required", dir)
		}
		host, _, _ := strings.Cut(ref, "/")
		r, err := name.NewRegistry(host)
		if err != nil {
			return nil, fmt.Errorf("--chart %s: %w", dir, err)
		}
		var opts []registry.ClientOption
		if r.Scheme() == "http" {
			opts = append(opts, registry.ClientOptPlainHTTP())
		}
		c, err := registry.NewClient(append(opts, registry.ClientOptWriter(io.Discard))...)
		if err != nil {
			return nil, err
		}
		res, err := c.Pull(ref+":"+version, registry.PullOptWithChart(true))
		if err != nil {
			return nil, fmt.Errorf("pull %s --version %s: %w", dir, version, err)
		}
		return loader.LoadArchive(bytes.NewReader(res.Chart.Data))
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	return ch, nil
}

func run(name, ns, chartDir, version string, opts values.Options, timeout time.Duration, reuse bool) error {
	var ch *chart.Chart
	if chartDir != "" {
		var err error
		if ch, err = loadChart(chartDir, version); err != nil {
			return err
		}
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
	rels, err := h.Run(name)
	if err == nil && ch == nil && len(rels) > 0 {
		// --reuse-values without --chart: the chart the release runs.
		acc, aerr := release.NewAccessor(rels[len(rels)-1])
		if aerr != nil {
			return aerr
		}
		c, ok := acc.Chart().(*chart.Chart)
		if !ok {
			return fmt.Errorf("release %s: a chart of an unknown API version", name)
		}
		ch = c
	}
	if ch == nil { // no release to take the chart of: the repository's
		var lerr error
		if ch, lerr = loadChart("deploy/helm/kdefer", ""); lerr != nil {
			return lerr
		}
	}
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

// configuration is Helm's for releases stored in ns, as Secrets (helm's default).
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

// rollBack is `helm rollback NAME`: a new revision with the previous one's
// chart and values, its manifests applied as they were (CRDs included).
func rollBack(name, ns string, timeout time.Duration) error {
	cfg, err := configuration(ns)
	if err != nil {
		return err
	}
	rb := action.NewRollback(cfg)
	rb.WaitStrategy, rb.Timeout = kube.HookOnlyStrategy, timeout
	if err := rb.Run(name); err != nil {
		return fmt.Errorf("rollback %s: %w", name, err)
	}
	fmt.Printf("rolled back release %s in namespace %s\n", name, ns)
	return nil
}
