package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
)

func init() {
	var f renderFlags
	cmd := &cobra.Command{
		Use:   "lint -f FILE|DIR|- [-R]",
		Short: "Explain every problem kdefer finds in Jobs, pods and DeferPolicies",
		Long: `Check every Job, CronJob, Pod, DeferPolicy and ClusterDeferPolicy of the input
as kdefer's webhooks,
the apiserver's strict decoding and kdefer's stage steps would, and explain
every problem at once, each with its fix. Exits 1 when there are problems,
0 when there are none (warnings alone do not fail).

  kdefer lint -f examples/ -R`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLint(cmd.InOrStdin(), cmd.OutOrStdout(), &f)
		},
	}
	f.add(cmd)
	rootCmd.AddCommand(cmd)
}

func runLint(stdin io.Reader, stdout io.Writer, f *renderFlags) error {
	docs, ps, err := readInput(&f.inputFlags, stdin)
	if err != nil {
		return err
	}
	total := 0
	for _, d := range docs {
		problems := append([]string{}, d.problems...)
		warnings := append([]string{}, d.warnings...)
		switch {
		case d.isPolicy():
			if d.policy != nil {
				problems = append(problems, policyProblems(&d.policy.Spec, f)...)
				warnings = append(warnings, render.PolicyWarnings(&d.policy.Spec)...)
			}
		case d.isClusterPolicy():
			if d.cluster != nil {
				problems = append(problems, clusterPolicyProblems(d.cluster, f)...)
				warnings = append(warnings, render.PolicyWarnings(&d.cluster.Spec.DeferPolicySpec)...)
			}
		case d.isJob() || d.isCronJob():
			j := d.job()
			if j == nil || !ps.arms(j) {
				if len(problems)+len(warnings) == 0 {
					continue
				}
				break
			}
			p, w := jobProblems(j, ps, f)
			problems, warnings = append(problems, p...), append(warnings, w...)
		case d.isPod():
			pod := d.podObj
			if pod == nil || !optsIn(pod.Labels, pod.Annotations) {
				if len(problems)+len(warnings) == 0 {
					continue
				}
				break
			}
			p, w := podProblems(pod, ps, f)
			problems, warnings = append(problems, p...), append(warnings, w...)
		default:
			continue
		}
		total += len(problems)
		if len(problems) == 0 && len(warnings) == 0 {
			fmt.Fprintf(stdout, "%s: ok\n", d)
			continue
		}
		fmt.Fprintf(stdout, "%s: %d problem(s), %d warning(s)\n", d, len(problems), len(warnings))
		for _, p := range problems {
			fmt.Fprintf(stdout, "  error: %s\n", p)
		}
		for _, w := range warnings {
			fmt.Fprintf(stdout, "  warning: %s\n", w)
		}
	}
	if total > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("%d problem(s) found", total)}
	}
	return nil
}

// policyProblems are what the DeferPolicy webhook refuses.
func policyProblems(s *v1.DeferPolicySpec, f *renderFlags) []string {
	errs := v1.ValidateDeferPolicySpec(s, field.NewPath("spec"))
	if !f.allowFileURLs {
		errs = append(errs, v1.ValidateFileURLs(s, field.NewPath("spec"))...)
	}
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}

// clusterPolicyProblems are what the ClusterDeferPolicy webhook refuses.
func clusterPolicyProblems(p *v1.ClusterDeferPolicy, f *renderFlags) []string {
	out := policyProblems(&p.Spec.DeferPolicySpec, f)
	opts := metav1validation.LabelSelectorValidationOptions{}
	errs := metav1validation.ValidateLabelSelector(&p.Spec.NamespaceSelector, opts, field.NewPath("spec", "namespaceSelector"))
	if p.Spec.JobSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(p.Spec.JobSelector, opts, field.NewPath("spec", "jobSelector"))...)
	}
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// jobProblems are what the Job webhook refuses of a Job it arms (opted in,
// or selected by a ClusterDeferPolicy of the input), and its warnings.
func jobProblems(j *batchv1.Job, ps policies, f *renderFlags) (problems, warnings []string) {
	marked, _, pol, err := ps.forJob(j)
	if marked.Labels[v1.LabelEnabled] != "true" {
		warnings = append(warnings, fmt.Sprintf("the Job has kdefer.io annotations but not the label %s: \"true\", so kdefer's webhook ignores it; add the label, or render it with kdefer render", v1.LabelEnabled))
	}
	warnings = append(warnings, render.Warnings(j)...)
	if w := ps.unknownNamespace(j.Namespace); w != "" {
		warnings = append(warnings, w)
	}
	j = marked
	if err != nil {
		problems = append(problems, err.Error())
		// Check the rest with the annotations alone.
		if _, err := v1.ParseAnnotations(j.Annotations); err != nil {
			problems = append(problems, render.Problems(err)...)
		}
		return problems, warnings
	}
	if _, err := render.Job(j, pol, f.options()); err != nil {
		problems = append(problems, render.Problems(err)...)
	}
	return problems, warnings
}

// podProblems are what the pod webhook refuses of an opted-in pod that no
// Job made (a CI runner's build pod), and its warnings.
func podProblems(pod *corev1.Pod, ps policies, f *renderFlags) (problems, warnings []string) {
	if pod.Labels[v1.LabelEnabled] != "true" {
		warnings = append(warnings, fmt.Sprintf("the pod has kdefer.io annotations but not the label %s: \"true\", so kdefer's webhook ignores it; add the label", v1.LabelEnabled))
	}
	warnings = append(warnings, render.PodWarnings(pod)...)
	pol, err := ps.spec(pod)
	if err != nil {
		problems = append(problems, err.Error())
		// Check the rest with the annotations alone.
		if _, err := v1.ParseAnnotations(pod.Annotations); err != nil {
			problems = append(problems, render.Problems(err)...)
		}
		return problems, warnings
	}
	if _, err := render.Pod(pod, pol, f.options()); err != nil {
		problems = append(problems, render.Problems(err)...)
	}
	return problems, warnings
}
