package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/cli-runtime/pkg/resource"
	"sigs.k8s.io/yaml"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
)

// resetFlags undoes the previous Execute's flags: the command tree is global.
func resetFlags() {
	for _, c := range rootCmd.Commands() {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				_ = sv.Replace(nil)
			} else {
				_ = f.Value.Set(f.DefValue)
			}
			f.Changed = false
		})
	}
}

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	resetFlags()
	var out, errb bytes.Buffer
	rootCmd.SetArgs(args)
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errb)
	rootCmd.SetIn(strings.NewReader(""))
	err := rootCmd.Execute()
	var ee *exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.code
		errb.WriteString(ee.msg)
	default:
		code = 2
		errb.WriteString(err.Error())
	}
	return out.String(), errb.String(), code
}

func TestRender(t *testing.T) {
	out, stderr, code := run(t, "render", "-f", "testdata/job.yaml", "--stage-image", "img:test")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	docs := strings.Split(out, "---\n")
	if len(docs) != 2 {
		t.Fatalf("got %d documents, want 2:\n%s", len(docs), out)
	}
	var got batchv1.Job
	if err := yaml.Unmarshal([]byte(docs[0]), &got); err != nil {
		t.Fatal(err)
	}
	in := readJob(t, "testdata/job.yaml")
	want, err := render.Job(in, nil, render.Options{StageImage: "img:test"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, &got); diff != "" {
		t.Errorf("kdefer render differs from render.Job (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n", docs[1]); diff != "" {
		t.Errorf("non-Job document changed (-want +got):\n%s", diff)
	}
	// Rendering the output again changes nothing.
	again, _, code := runWithStdin(t, out, "render", "-f", "-", "--stage-image", "img:test")
	if code != 0 || again != out {
		t.Errorf("render of rendered output differs (exit %d):\n%s", code, cmp.Diff(out, again))
	}
}

func runWithStdin(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	resetFlags()
	var out, errb bytes.Buffer
	rootCmd.SetArgs(args)
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errb)
	rootCmd.SetIn(strings.NewReader(stdin))
	err := rootCmd.Execute()
	var ee *exitError
	if errors.As(err, &ee) {
		return out.String(), ee.msg, ee.code
	}
	return out.String(), errb.String(), 0
}

func readJob(t *testing.T, file string) *batchv1.Job {
	t.Helper()
	docs, _, err := readInput(&inputFlags{FilenameOptions: resource.FilenameOptions{Filenames: []string{file}}, validate: validateStrict}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if docs[0].problems != nil {
		t.Fatal(docs[0].problems)
	}
	return docs[0].job()
}

func TestRenderWithPolicyKeepsUnknownFields(t *testing.T) {
	out, stderr, code := run(t, "render", "--validate=warn", "-f", "testdata/policy-job.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"futureField: kept", "gs://team/{job}/{pod}/", "name: gcs", "kdefer.io/defer"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if want := `Warning: testdata/policy-job.yaml#2: Job physics/uses-policy: line 19: unknown field "spec.template.spec.futureField"`; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	// Strict (the default) refuses the field, naming its line.
	_, stderr, code = run(t, "render", "-f", "testdata/policy-job.yaml")
	if code != 1 || !strings.Contains(stderr, `line 19: unknown field "spec.template.spec.futureField"`) {
		t.Errorf("strict render: exit %d, stderr:\n%s", code, stderr)
	}
}

func TestRenderMissingPolicy(t *testing.T) {
	_, stderr, code := runWithStdin(t, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: {kdefer.io/enabled: \"true\"}, annotations: {kdefer.io/policy: nope}}\nspec: {template: {spec: {containers: [{name: m, image: x}]}}}\n", "render", "-f", "-")
	if code != 1 || !strings.Contains(stderr, `annotation kdefer.io/policy: names DeferPolicy "nope", which is not in the input; fix: pass the policy too`) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}

func TestLint(t *testing.T) {
	out, _, code := run(t, "lint", "-f", "testdata/bad.yaml", "-f", "testdata/job.yaml", "-f", "testdata/policy-job.yaml")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	want := `testdata/bad.yaml#1: Job bad: 3 problem(s), 3 warning(s)
  error: annotation kdefer.io/deadline: "3x" is not a positive duration; fix: use a Go duration such as 30m or 2h
  error: annotation kdefer.io/stage-out: "http://x" has scheme "http"; kdefer understands s3, gs, azblob, file; fix: use e.g. s3://bucket/runs/{namespace}/{job}/{pod}/
  error: spec.template.spec.containers[0] (main).envFrom: receives the credentials Secret "minio"; fix: kdefer gives the Secret named by kdefer.io/credentials only to its stage steps: give the container a different Secret, or remove the reference
  warning: the Job has kdefer.io annotations but not the label kdefer.io/enabled: "true", so kdefer's webhook ignores it; add the label, or render it with kdefer render
  warning: annotation kdefer.io/tigers is not a kdefer annotation and is ignored; did you mean kdefer.io/triggers?
  warning: annotation kdefer.io/stage-out: ` + v1.StageOutCollision("http://x") + `
testdata/job.yaml#1: Job physics/sim: ok
testdata/policy-job.yaml#1: DeferPolicy physics/team: ok
testdata/policy-job.yaml#2: Job physics/uses-policy: 1 problem(s), 0 warning(s)
  error: line 19: unknown field "spec.template.spec.futureField"; fix: correct or remove it (--validate=warn accepts fields of a newer API version)
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("lint output (-want +got):\n%s", diff)
	}
	out, _, code = run(t, "lint", "-f", "testdata/job.yaml")
	if code != 0 {
		t.Errorf("lint of a good Job: exit %d:\n%s", code, out)
	}
}

// Lint refuses what the webhooks refuse: mem:// URLs, file:// URLs (unless
// --allow-file-urls, as the controller), defer containers that weaken Pod
// Security or read the stage credentials.
func TestLintUnsafe(t *testing.T) {
	out, _, code := run(t, "lint", "-f", "testdata/unsafe.yaml")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	want := `testdata/unsafe.yaml#1: DeferPolicy physics/root: 3 problem(s), 0 warning(s)
  error: spec.deferContainers[0].env[0].valueFrom.secretKeyRef: Forbidden: reads the stage credentials Secret "minio"; fix: give the defer container a Secret of its own; the stage credentials (minio) go only to kdefer's stage steps
  error: spec.deferContainers[0].securityContext.privileged: Forbidden: a privileged container owns the node: defer pods meet the Pod Security Standard restricted; fix: remove privileged
  error: spec.stageOut.url: Forbidden: file:// URLs write to the node's filesystem and are allowed only when kdefer-controller runs with --allow-file-urls; fix: use s3://, gs:// or azblob://
testdata/unsafe.yaml#2: Job physics/mem: 1 problem(s), 0 warning(s)
  error: annotation kdefer.io/stage-out: "mem://b/{pod}/" is in the memory of the stage step, which nothing outlives, so nothing would be saved (mem:// is for kdefer-stage's tests); use s3://, gs:// or azblob://; fix: use e.g. s3://bucket/runs/{namespace}/{job}/{pod}/
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("lint output (-want +got):\n%s", diff)
	}
	out, _, _ = run(t, "lint", "--allow-file-urls", "-f", "testdata/unsafe.yaml")
	if strings.Contains(out, "file://") || !strings.Contains(out, "DeferPolicy physics/root: 2 problem(s)") {
		t.Errorf("lint --allow-file-urls still refuses file://:\n%s", out)
	}
}

func TestRenderCronJob(t *testing.T) {
	out, stderr, code := run(t, "render", "-f", "testdata/cronjob.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var cj batchv1.CronJob
	if err := yaml.Unmarshal([]byte(out), &cj); err != nil {
		t.Fatal(err)
	}
	tmpl := cj.Spec.JobTemplate.Spec.Template
	if cj.Spec.Schedule != "0 2 * * *" || tmpl.Labels["kdefer.io/managed"] != "true" || len(tmpl.Finalizers) != 1 {
		t.Errorf("CronJob jobTemplate not rendered:\n%s", out)
	}
	if out2, _, _ := runWithStdin(t, out, "lint", "-f", "-"); !strings.Contains(out2, "CronJob physics/nightly: ok") {
		t.Errorf("lint of the rendered CronJob:\n%s", out2)
	}
}

// exitCodeOf is the exit code a command's error asks for (0 for nil); any
// other error fails the test.
func exitCodeOf(t *testing.T, err error) int {
	t.Helper()
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	t.Fatal(err)
	return 0
}
