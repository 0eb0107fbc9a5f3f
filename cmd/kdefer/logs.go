package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

func init() {
	var step string
	var follow, archived bool
	cmd := objectCommand(&cobra.Command{
		Use:   "logs deferrun/NAME",
		Short: "Print the logs of a defer run's steps, in order; --archived: the ended pod's and the steps' logs from the bucket",
	}, "deferrun", []string{"deferrun", "pod"}, func(ctx context.Context, cmd *cobra.Command, t target) error {
		c, ns, name := t.c, t.ns, t.name
		run := &v1.DeferRun{}
		if err := c.Get(ctx, clientKey(ns, name), run); err != nil {
			return &exitError{code: 1, msg: err.Error()}
		}
		if archived {
			if err := archivedLogs(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), run, step); err != nil {
				return &exitError{code: 1, msg: err.Error()}
			}
			return nil
		}
		pod := &corev1.Pod{}
		if err := c.Get(ctx, clientKey(ns, v1.DeferPodName(run)), pod); err != nil {
			if apierrors.IsNotFound(err) && run.Status.ManifestURL != "" {
				// The pods are gone: what the bucket kept.
				fmt.Fprintf(cmd.ErrOrStderr(), "defer pod of %s is gone: the logs archived in the bucket\n", name)
				aerr := archivedLogs(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), run, step)
				if aerr == nil {
					return nil
				}
				err = fmt.Errorf("%w; archived logs: %w", err, aerr)
			}
			return &exitError{code: 1, msg: fmt.Sprintf("defer pod of %s: %v (a skipped run has none; the defer pod goes with the work volume when it is released: kdefer logs --archived prints the ended pod's logs from the bucket, kdefer status each step's exit and message)", name, err)}
		}
		cs, err := t.flags.clientset()
		if err != nil {
			return err
		}
		var steps []string
		for _, ctr := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			// The stage-logs sidecar runs until the last step ends: only
			// when asked for, so --follow reaches the steps after it.
			if (step == "" && ctr.Name != v1.StageLogsName) || step == ctr.Name {
				steps = append(steps, ctr.Name)
			}
		}
		if len(steps) == 0 {
			return &exitError{code: 2, msg: fmt.Sprintf("no step %q in %s", step, pod.Name)}
		}
		for _, s := range steps {
			if len(steps) > 1 {
				fmt.Fprintf(cmd.OutOrStdout(), "==> step %s <==\n", s)
			}
			if err := streamLogs(ctx, cmd.OutOrStdout(), cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: s, Follow: follow})); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "step %s: %v\n", s, err)
			}
		}
		return nil
	})
	cmd.Flags().StringVarP(&step, "step", "c", "", "only this step (stage-out or a defer container's name)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log")
	cmd.Flags().BoolVar(&archived, "archived", false, "print the logs archived in the bucket (stageOut.logs: the ended pod's containers', the stage step's and the defer containers'), read with your own store credentials; -c picks a container")
	rootCmd.AddCommand(cmd)
}

type streamer interface {
	Stream(context.Context) (io.ReadCloser, error)
}

func streamLogs(ctx context.Context, w io.Writer, req streamer) error {
	rc, err := req.Stream(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}
