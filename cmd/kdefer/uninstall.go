package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/spf13/cobra"

	"github.com/kdefer/kdefer/uninstall"
)

func init() {
	f := &clusterFlags{}
	o := uninstall.Options{}
	var quiet bool
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Take kdefer's hold off the cluster before removing kdefer (kubectl delete -f manifests.yaml)",
		Long: `Wait (--wait) for the defer runs in flight to finish, stop kdefer's controller,
then remove kdefer's finalizers from every managed pod (with a Disarmed Event)
and DeferRun: volumes of finished runs are released, the volume of a pod still
running goes with its pod, and the volume of a run that had not finished (or
that retained its volume) is kept with label kdefer.io/kept and no owner, for
kdefer release deferrun/NAME. Run it again after kdefer is gone to disarm pods
that a rendered Job started since. The chart runs the same steps as a
pre-delete hook: helm uninstall needs no extra step.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			o.Log = logr.Discard()
			if !quiet {
				o.Log = funcr.New(func(prefix, args string) { fmt.Fprintln(cmd.ErrOrStderr(), args) }, funcr.Options{})
			}
			res, err := uninstall.Run(ctx, c, o)
			if err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "waited %s for runs in flight (%d unfinished); disarmed %d pods, released %d work volumes, kept %d\n",
				res.Waited.Round(time.Second), res.Unfinished, len(res.Disarmed), len(res.Released), len(res.Kept))
			for _, k := range res.Kept {
				fmt.Fprintf(w, "kept: pvc %s (kubectl get pvc -A -l kdefer.io/kept; kdefer release deferrun/NAME deletes it)\n", k)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&o.Wait, "wait", uninstall.DefaultWait, "how long to wait for runs in flight (their pod ended, their stage-out not finished) before stopping the controller; 0: no wait")
	cmd.Flags().StringVar(&o.Namespace, "controller-namespace", "kdefer-system", "namespace of kdefer's controller Deployment")
	cmd.Flags().StringVar(&o.Deployment, "controller-deployment", "kdefer-controller", "name of kdefer's controller Deployment")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the summary")
	f.add(cmd)
	rootCmd.AddCommand(cmd)
}
