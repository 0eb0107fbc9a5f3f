package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
)

type renderFlags struct {
	inputFlags
	stageImage    string
	pullPolicy    string
	allowFileURLs bool
}

func (f *renderFlags) add(cmd *cobra.Command) {
	f.inputFlags.add(cmd)
	cmd.Flags().StringVar(&f.stageImage, "stage-image", v1.DefaultStageImage(), "image of kdefer-stage for stage-in containers")
	cmd.Flags().StringVar(&f.pullPolicy, "image-pull-policy", string(corev1.PullIfNotPresent), "pull policy of the stage-in containers")
	cmd.Flags().BoolVar(&f.allowFileURLs, "allow-file-urls", false, "accept file:// stage URLs, as kdefer-controller --allow-file-urls does")
}

func (f *renderFlags) options() render.Options {
	return render.Options{StageImage: f.stageImage, ImagePullPolicy: corev1.PullPolicy(f.pullPolicy), AllowFileURLs: f.allowFileURLs}
}

func init() {
	var f renderFlags
	cmd := &cobra.Command{
		Use:   "render -f FILE|DIR|- [-R]",
		Short: "Render Jobs for kdefer offline and write them to stdout",
		Long: `Render every batch/v1 Job (and CronJob jobTemplate) of the input that opts in
to kdefer (label kdefer.io/enabled=true or any kdefer.io annotation) as
kdefer's webhook would, and write all documents to stdout; other documents
pass through unchanged.
A Job that names a DeferPolicy needs that policy in the input. Warnings
(the webhook's, and unknown fields with --validate=warn) go to stderr.

  kdefer render -f job.yaml | kubectl apply -f -
  kdefer render -f policy.yaml -f job.yaml | kubectl apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRender(cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), &f)
		},
	}
	f.add(cmd)
	rootCmd.AddCommand(cmd)
}

func runRender(stdin io.Reader, stdout, stderr io.Writer, f *renderFlags) error {
	docs, ps, err := readInput(&f.inputFlags, stdin)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	var problems []string
	for i, d := range docs {
		if i > 0 {
			out.WriteString("---\n")
		}
		for _, p := range d.problems {
			problems = append(problems, fmt.Sprintf("%s: %s", d, p))
		}
		for _, w := range d.warnings {
			fmt.Fprintf(stderr, "Warning: %s: %s\n", d, w)
		}
		if !d.isJob() && !d.isCronJob() || len(d.problems) > 0 {
			out.Write(bytes.TrimRight(d.raw, "\n"))
			out.WriteString("\n")
			continue
		}
		y, warnings, perr := renderDocument(d, ps, f.options())
		for _, w := range warnings {
			fmt.Fprintf(stderr, "Warning: %s: %s\n", d, w)
		}
		if perr != nil {
			for _, p := range render.Problems(perr) {
				problems = append(problems, fmt.Sprintf("%s: %s", d, p))
			}
			continue
		}
		out.Write(y)
	}
	if len(problems) > 0 {
		return &exitError{code: 1, msg: "cannot render:\n  " + strings.Join(problems, "\n  ")}
	}
	_, err = stdout.Write(out.Bytes())
	return err
}

// renderDocument renders one Job document. The result is the original
// document with render's changes merged in (a strategic merge patch), so
// fields render does not touch keep exactly what the user wrote, including
// fields this version of the Job type does not know.
func renderDocument(d *document, ps policies, opts render.Options) ([]byte, []string, error) {
	j := d.job()
	marked, armed, pol, err := ps.forJob(j)
	if !armed {
		return append(bytes.TrimRight(d.raw, "\n"), '\n'), nil, nil
	}
	warnings := render.Warnings(j)
	if w := ps.unknownNamespace(j.Namespace); w != "" {
		warnings = append(warnings, w)
	}
	if err != nil {
		return nil, warnings, err
	}
	r, err := render.Job(marked, pol, opts)
	if err != nil {
		return nil, warnings, err
	}
	var before, after any = j, r
	var schema any = batchv1.Job{}
	if d.cronObj != nil {
		rendered := d.cronObj.DeepCopy()
		rendered.Spec.JobTemplate.Spec = r.Spec
		rendered.Spec.JobTemplate.Labels = r.Labels
		before, after, schema = d.cronObj, rendered, batchv1.CronJob{}
	}
	y, err := mergeInto(d.json, before, after, schema)
	return y, warnings, err
}

// mergeInto applies the change from before to after to the document as
// written (a strategic merge patch) and returns it as YAML.
func mergeInto(doc []byte, before, after, schema any) ([]byte, error) {
	beforeJSON, err := json.Marshal(before)
	if err != nil {
		return nil, err
	}
	afterJSON, err := json.Marshal(after)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(beforeJSON, afterJSON, schema)
	if err != nil {
		return nil, err
	}
	merged, err := strategicpatch.StrategicMergePatch(doc, patch, schema)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(merged)
}
