package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

func init() {
	var timeout time.Duration
	retry := objectCommand(&cobra.Command{
		Use:   "retry deferrun/NAME",
		Short: "Resume a failed run whose work volume is kept: the steps that have not succeeded run again",
		Long: `Ask the controller to resume a Failed defer run whose work volume is kept
(the default after a failure): a new defer pod on the run's node runs the
steps that have not succeeded, from the first one that failed, with a fresh
deadline. The request is the annotation kdefer.io/retry set to the current
time (as kubectl rollout restart sets restartedAt); the controller records
each request it handled in status.retries. The command returns once the
controller has granted the request; follow the run with
'kdefer wait deferrun/NAME'. Exit codes: 0 resumed, 1 the run cannot be
retried (not Failed, volume released, refused), 2 usage or API errors,
3 the controller did not answer in time.`,
	}, "deferrun", []string{"deferrun"}, func(ctx context.Context, cmd *cobra.Command, t target) error {
		return retryRun(ctx, cmd.OutOrStdout(), t.c, t.ns, t.name, time.Now(), timeout, time.Second)
	})
	retry.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the controller to take the request (0: do not wait)")
	rootCmd.AddCommand(retry)
}

// retryRun checks that the run can be retried (so that a mistake gets a
// clear answer at once, not a Warning event), sets the request and waits
// until the controller has handled it.
func retryRun(ctx context.Context, w io.Writer, c client.Client, ns, name string, now time.Time, timeout, every time.Duration) error {
	run := &v1.DeferRun{}
	if err := getRun(ctx, c, ns, name, run); err != nil {
		return err
	}
	if why := notRetriable(run); why != "" {
		return &exitError{code: 1, msg: fmt.Sprintf("deferrun %s/%s cannot be retried: %s", ns, name, why)}
	}
	// A granted request raises status.retries.count, a refused one does not:
	// the count tells them apart even when the resumed run has already
	// failed again by the time this looks (its Failed condition says
	// nothing of the grant then).
	before := int32(0)
	if run.Status.Retries != nil {
		before = run.Status.Retries.Count
	}
	req := now.UTC().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1.AnnotationRetry, req)
	if err := c.Patch(ctx, run, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return &exitError{code: 2, msg: fmt.Sprintf("requesting the retry: %v", err)}
	}
	if timeout <= 0 {
		fmt.Fprintf(w, "deferrun/%s: retry requested\n", name)
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		if err := getRun(ctx, c, ns, name, run); err != nil {
			return err
		}
		if rt := run.Status.Retries; rt != nil && rt.HandledRequest == req {
			if rt.Count > before {
				fmt.Fprintf(w, "deferrun/%s: resumed (attempt %d); follow it with `kdefer wait deferrun/%s`\n", name, before+2, name)
				return nil
			}
			return &exitError{code: 1, msg: fmt.Sprintf("deferrun %s/%s: the controller refused the retry (see `kubectl describe deferrun %s`, event %s)", ns, name, name, v1.EventRetryRefused)}
		}
		if time.Now().After(deadline) {
			return &exitError{code: 3, msg: fmt.Sprintf("deferrun %s/%s: the controller did not take the retry request within %s (is kdefer-controller running?); the request stays set", ns, name, timeout)}
		}
		select {
		case <-ctx.Done():
			return &exitError{code: 2, msg: ctx.Err().Error()}
		case <-time.After(every):
		}
	}
}

// notRetriable says why a run cannot be retried, "" if it can: the
// controller's rule (controller.ResumeOf), checked here for a clear answer.
func notRetriable(run *v1.DeferRun) string {
	switch {
	case !meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunFailed):
		state := run.Status.State
		if state == "" {
			state = "Armed"
		}
		return fmt.Sprintf("it is %s, not Failed", state)
	case meta.IsStatusConditionTrue(run.Status.Conditions, v1.DeferRunVolumeReleased) || run.Annotations[v1.AnnotationRelease] == "true" || run.DeletionTimestamp != nil:
		return "its work volume is released: nothing is left to stage out"
	}
	return ""
}

func getRun(ctx context.Context, c client.Client, ns, name string, run *v1.DeferRun) error {
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
		if apierrors.IsNotFound(err) {
			return &exitError{code: 1, msg: fmt.Sprintf("deferrun %s/%s: no such defer run", ns, name)}
		}
		return &exitError{code: 2, msg: err.Error()}
	}
	return nil
}
