package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/uninstall"
)

func init() {
	var statusOut, waitOut outputFlags
	status := objectCommand(&cobra.Command{
		Use:   "status job/NAME | pod/NAME | deferrun/NAME",
		Short: "Show the defer runs of a Job, a pod or one run",
	}, "job", []string{"job", "pod", "deferrun"}, func(ctx context.Context, cmd *cobra.Command, t target) error {
		runs, job, err := findRuns(ctx, t.c, t.ns, t.kind, t.name)
		if err != nil {
			return err
		}
		return statusOut.printRuns(cmd.OutOrStdout(), runs, job)
	})
	statusOut.add(status)

	var timeout time.Duration
	wait := objectCommand(&cobra.Command{
		Use:   "wait job/NAME | pod/NAME | deferrun/NAME",
		Short: "Wait until every defer run is final; exit 1 if any failed",
		Long: `Wait until the Job has finished and every defer run of its pods is final
(Succeeded, Failed or Skipped), then print them. Exit codes: 0 none failed,
1 some failed, 2 usage or API errors, 3 timed out.`,
	}, "job", []string{"job", "pod", "deferrun"}, func(ctx context.Context, cmd *cobra.Command, t target) error {
		return waitRuns(ctx, cmd.OutOrStdout(), &waitOut, t.c, t.ns, t.kind, t.name, timeout, time.Second)
	})
	waitOut.add(wait)
	wait.Flags().DurationVar(&timeout, "timeout", time.Hour, "give up after this long (exit 3)")

	skip := objectCommand(&cobra.Command{
		Use:   "skip pod/NAME | job/NAME",
		Short: "Skip the defer runs of a pod or Job: release the volume without staging out",
	}, "pod", []string{"pod", "job"}, func(ctx context.Context, cmd *cobra.Command, t target) error {
		var obj client.Object = &corev1.Pod{}
		if t.kind == "job" {
			obj = &batchv1.Job{}
		}
		if err := annotate(ctx, t.c, obj, t.ns, t.name, v1.AnnotationSkip); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s/%s: defer runs will be skipped\n", t.kind, t.name)
		return nil
	})

	release := objectCommand(&cobra.Command{
		Use:   "release deferrun/NAME",
		Short: "Release a run's work volume (a retained one after a failure, or stop an unfinished run)",
	}, "deferrun", []string{"deferrun"}, func(ctx context.Context, cmd *cobra.Command, t target) error {
		// Volumes kept when kdefer was uninstalled have no controller to
		// release them (and their run may be gone with its CRD): deleted
		// here, and the run, if any, is annotated as usual.
		kept, err := uninstall.ReleaseKept(ctx, t.c, t.ns, t.name)
		if err != nil {
			return &exitError{code: 2, msg: err.Error()}
		}
		if err := annotate(ctx, t.c, &v1.DeferRun{}, t.ns, t.name, v1.AnnotationRelease); err != nil && len(kept) == 0 {
			return err
		}
		if len(kept) > 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "deferrun/%s: deleted its kept work volume %s\n", t.name, strings.Join(kept, ", "))
			return nil
		}
		fmt.Fprintf(cmd.OutOrStdout(), "deferrun/%s: its work volume will be released\n", t.name)
		return nil
	})
	rootCmd.AddCommand(status, wait, skip, release)
}

// target is the one object a cluster command works on, with the client and
// the flags that reach its cluster.
type target struct {
	c              client.Client
	flags          *clusterFlags
	ns, kind, name string
}

// objectCommand completes cmd as a command on one object named KIND/NAME
// (kind def when left out, one of allowed): it adds the cluster flags and
// resolves the reference, client and namespace before handing over to run,
// so that every such command treats a bad reference or kubeconfig alike.
func objectCommand(cmd *cobra.Command, def string, allowed []string, run func(ctx context.Context, cmd *cobra.Command, t target) error) *cobra.Command {
	f := &clusterFlags{}
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		kind, name, err := parseRef(args[0], def, allowed...)
		if err != nil {
			return err
		}
		c, err := f.client()
		if err != nil {
			return err
		}
		ns, err := f.ns()
		if err != nil {
			return err
		}
		return run(ctx, cmd, target{c: c, flags: f, ns: ns, kind: kind, name: name})
	}
	f.add(cmd)
	return cmd
}

func annotate(ctx context.Context, c client.Client, obj client.Object, ns, name, key string) error {
	obj.SetNamespace(ns)
	obj.SetName(name)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, key)
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		if apierrors.IsNotFound(err) {
			return &exitError{code: 1, msg: err.Error()}
		}
		return &exitError{code: 2, msg: err.Error()}
	}
	return nil
}

// findRuns returns the runs of a Job, a pod (its run) or one run, and the
// Job when kind is job (nil if it is gone).
func findRuns(ctx context.Context, c client.Client, ns, kind, name string) ([]v1.DeferRun, *batchv1.Job, error) {
	switch kind {
	case "job":
		var list v1.DeferRunList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1.LabelJobName: v1.LabelValue(name)}); err != nil {
			return nil, nil, &exitError{code: 2, msg: err.Error()}
		}
		var runs []v1.DeferRun
		for _, r := range list.Items {
			if r.Spec.JobName == name {
				runs = append(runs, r)
			}
		}
		job := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, nil, &exitError{code: 2, msg: err.Error()}
			}
			job = nil
		}
		if job == nil && len(runs) == 0 {
			return nil, nil, &exitError{code: 1, msg: fmt.Sprintf("job %s/%s: no such Job and no defer runs", ns, name)}
		}
		sort.Slice(runs, func(i, j int) bool { return runs[i].Name < runs[j].Name })
		return runs, job, nil
	default: // pod and deferrun: the run has the pod's name
		run := &v1.DeferRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, &exitError{code: 1, msg: fmt.Sprintf("%s %s/%s: no defer run (the pod is not managed by kdefer, or its run was deleted after its TTL)", kind, ns, name)}
			}
			return nil, nil, &exitError{code: 2, msg: err.Error()}
		}
		return []v1.DeferRun{*run}, nil, nil
	}
}

func printRuns(w io.Writer, runs []v1.DeferRun, job *batchv1.Job, wide bool) {
	if job != nil {
		s := job.Annotations[v1.AnnotationSummary]
		if s == "" {
			s = "no run finished yet"
		}
		fmt.Fprintf(w, "Job %s/%s: %s\n", job.Namespace, job.Name, s)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "RUN\tNODE\tTRIGGER\tSTATE\tOBJECTS\tBYTES\tVOLUME\tMESSAGE"
	if wide {
		head = "RUN\tJOB\tPOD\tNODE\tTRIGGER\tSTATE\tOBJECTS\tBYTES\tUNSAVED\tVOLUME\tMESSAGE"
	}
	fmt.Fprintln(tw, head)
	for i := range runs {
		r := &runs[i]
		state := r.Status.State
		if state == "" {
			state = "Armed"
		}
		vol := "kept"
		if meta.IsStatusConditionTrue(r.Status.Conditions, v1.DeferRunVolumeReleased) {
			vol = "released"
		}
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.Name, dash(r.Spec.JobName), r.Spec.PodName, dash(r.Status.NodeName), dash(string(r.Status.Trigger)), state,
				r.Status.Objects, r.Status.Bytes, r.Status.Unsaved, vol, message(r))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Name, dash(r.Status.NodeName), dash(string(r.Status.Trigger)), state,
			r.Status.Objects, r.Status.Bytes, vol, message(r))
	}
	_ = tw.Flush()
}

// message is the most telling condition message of a run.
func message(r *v1.DeferRun) string {
	for _, t := range []string{v1.DeferRunFailed, v1.DeferRunConfigError, v1.DeferRunSucceeded, v1.DeferRunSkipped, v1.DeferRunStagingOut} {
		if c := meta.FindStatusCondition(r.Status.Conditions, t); c != nil && (c.Status == "True" || t == v1.DeferRunStagingOut) && c.Message != "" {
			return c.Reason + ": " + oneLine(c.Message)
		}
	}
	return ""
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// waitRuns polls until the runs are final (and a Job has finished).
func waitRuns(ctx context.Context, w io.Writer, out *outputFlags, c client.Client, ns, kind, name string, timeout, every time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		runs, job, err := findRuns(ctx, c, ns, kind, name)
		if err != nil {
			return err
		}
		done := len(runs) > 0 || job != nil
		failed := 0
		for i := range runs {
			if !v1.Finished(&runs[i]) {
				done = false
			}
			if meta.IsStatusConditionTrue(runs[i].Status.Conditions, v1.DeferRunFailed) {
				failed++
			}
		}
		if job != nil && !jobFinished(job) {
			done = false
		}
		if done {
			if err := out.printRuns(w, runs, job); err != nil {
				return err
			}
			if failed > 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("%d of %d defer runs failed", failed, len(runs))}
			}
			return nil
		}
		if time.Now().After(deadline) {
			_ = out.printRuns(w, runs, job)
			return &exitError{code: 3, msg: fmt.Sprintf("timed out after %s", timeout)}
		}
		select {
		case <-ctx.Done():
			return &exitError{code: 2, msg: ctx.Err().Error()}
		case <-time.After(every):
		}
	}
}

func jobFinished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
