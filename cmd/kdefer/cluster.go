package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kdefer/kdefer/api/scheme"
)

// clusterFlags are the flags of the commands that talk to a cluster
// (status, wait, skip, release, logs, version, uninstall): kubectl's own
// (--kubeconfig --context -n --as --as-group --server --token ...), from
// cli-runtime, so that `kubectl kdefer` reads the cluster as kubectl does.
type clusterFlags struct {
	config *genericclioptions.ConfigFlags

	// newClient is replaced by tests.
	newClient func() (client.Client, error)
}

func (f *clusterFlags) add(cmd *cobra.Command) {
	f.config = genericclioptions.NewConfigFlags(true)
	f.config.AddFlags(cmd.Flags())
}

func (f *clusterFlags) restConfig() (*rest.Config, error) {
	cfg, err := f.config.ToRESTConfig()
	if err != nil {
		return nil, &exitError{code: 2, msg: fmt.Sprintf("loading kubeconfig: %v", err)}
	}
	return cfg, nil
}

func (f *clusterFlags) ns() (string, error) {
	ns, _, err := f.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", &exitError{code: 2, msg: fmt.Sprintf("namespace: %v", err)}
	}
	return ns, nil
}

func (f *clusterFlags) client() (client.Client, error) {
	if f.newClient != nil {
		return f.newClient()
	}
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, &exitError{code: 2, msg: err.Error()}
	}
	return c, nil
}

func (f *clusterFlags) clientset() (kubernetes.Interface, error) {
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// parseRef splits "kind/name" (kind optional: def) and normalises the kind,
// accepting the names kubectl accepts (drun is DeferRun's short name; not
// dr, which is Istio's DestinationRule).
func parseRef(arg, def string, allowed ...string) (string, string, error) {
	kind, name := def, arg
	if i := strings.Index(arg, "/"); i >= 0 {
		kind, name = strings.ToLower(arg[:i]), arg[i+1:]
	}
	switch kind {
	case "jobs", "job.batch":
		kind = "job"
	case "pods", "po":
		kind = "pod"
	case "deferruns", "drun", "deferrun.kdefer.io", "deferruns.kdefer.io":
		kind = "deferrun"
	}
	for _, a := range allowed {
		if a == kind && name != "" {
			return kind, name, nil
		}
	}
	return "", "", &exitError{code: 2, msg: fmt.Sprintf("%q: want %s/NAME", arg, strings.Join(allowed, "/NAME or "))}
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
