package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kdefer/kdefer/internal/version"
)

// The controller's Deployment, found by these labels (the kustomize base and
// any install that keeps them); its version is the label
// app.kubernetes.io/version when set, else the tag of its manager image: both
// are one read of an object an install already has, no endpoint to serve.
const (
	controllerSelector = "app.kubernetes.io/name=kdefer,app.kubernetes.io/component=controller"
	versionLabel       = "app.kubernetes.io/version"
)

func init() {
	f := &clusterFlags{}
	var clientOnly bool
	var controllerNS string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client's version and the controller's",
		Long: `Print this binary's version and that of the kdefer controller in the
cluster: the app.kubernetes.io/version label of the Deployment labelled
` + controllerSelector + ` in --controller-namespace, or its
manager image's tag.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "Client: %s\n", clientVersion())
			if clientOnly {
				return nil
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return printControllerVersion(ctx, cmd.OutOrStdout(), c, controllerNS)
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the client's version only")
	cmd.Flags().StringVar(&controllerNS, "controller-namespace", "kdefer-system", "namespace of the kdefer controller")
	f.add(cmd)
	rootCmd.AddCommand(cmd)
}

// clientVersion is the stamped version, with the module version `go
// install ...@version` records when it differs.
func clientVersion() string {
	v := version.Version
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" && bi.Main.Version != v {
		v += " (module " + bi.Main.Version + ")"
	}
	return v + ", " + runtime.Version()
}

func printControllerVersion(ctx context.Context, w io.Writer, c client.Client, ns string) error {
	var list appsv1.DeploymentList
	sel, _ := labels.Parse(controllerSelector)
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return &exitError{code: 2, msg: fmt.Sprintf("controller version: %v", err)}
	}
	if len(list.Items) == 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("controller version: no Deployment labelled %s in namespace %s (is kdefer installed there? see --controller-namespace)", controllerSelector, ns)}
	}
	for _, d := range list.Items {
		fmt.Fprintf(w, "Controller: %s (deployment %s/%s)\n", deploymentVersion(&d), d.Namespace, d.Name)
	}
	return nil
}

func deploymentVersion(d *appsv1.Deployment) string {
	if v := d.Labels[versionLabel]; v != "" {
		return v
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "manager" {
			continue
		}
		img := c.Image
		if i := strings.Index(img, "@"); i >= 0 {
			return img[i+1:]
		}
		if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
			return img[i+1:]
		}
		return img
	}
	return "unknown"
}
