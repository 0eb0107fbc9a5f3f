package main

import (
	"fmt"
	"strings"
	"testing"
)

// lintJob is an opted-in Job with the given annotations (YAML flow map
// entries) and containers (YAML flow sequence entries).
func lintJob(annotations, containers string) string {
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: j
  namespace: ns
  labels: {kdefer.io/enabled: "true"}
  annotations: {%s}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [%s]
`, annotations, containers)
}

// lintPolicy is a DeferPolicy with the given spec (YAML, indented two).
func lintPolicy(spec string) string {
	return "apiVersion: kdefer.io/v1alpha1\nkind: DeferPolicy\nmetadata: {name: p, namespace: ns}\nspec:\n" + spec
}

const okMain = `{name: main, image: busybox:1.36}`

// lintPod is an opted-in pod that no Job made (a CI runner's build pod)
// with the given annotations and restart policy.
func lintPod(annotations, restartPolicy string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: runner-1
  namespace: ns
  labels: {kdefer.io/enabled: "true"}
  annotations: {%s}
spec:
  restartPolicy: %s
  containers: [%s]
`, annotations, restartPolicy, okMain)
}

// TestLintRefuses holds one bad input for each rule by which the webhooks,
// the apiserver's strict decoding or the stage step refuse a Job or a
// DeferPolicy: lint must refuse it too (exit 1), naming the problem,
// before any pod runs.
func TestLintRefuses(t *testing.T) {
	cases := map[string]struct {
		input, want string
	}{
		// Strict decoding (the apiserver with kubectl's --validate=strict).
		"unknown field, with its line": {lintPolicy("  stageOut:\n    url: s3://b/{pod}/\n    exclud: [x]\n"),
			`line 7: unknown field "spec.stageOut.exclud"`},
		"duplicate field": {strings.Replace(lintJob(`kdefer.io/stage-out: "s3://b/{pod}/"`, okMain), "  name: j\n", "  name: j\n  name: k\n", 1),
			`line 5: key "name" already set in map`},
		"value of the wrong type": {lintPolicy("  stageOut: {url: \"s3://b/{pod}/\"}\n  retryLimit: many\n"),
			`line 6: spec.retryLimit: cannot be a JSON string`},
		"policy duration that does not parse": {lintPolicy("  stageOut: {url: \"s3://b/{pod}/\"}\n  deadline: 3x\n"),
			`cannot decode: time: unknown unit "x" in duration "3x"`},
		// The stage step's URL parameters (stagecontract.CheckURLQuery).
		"unknown s3 URL parameter": {lintJob(`kdefer.io/stage-out: "s3://b/{pod}/?endpont=http://minio:9000"`, okMain),
			`s3 URL parameter "endpont" is unknown`},
		"s3 URL parameter not a boolean": {lintJob(`kdefer.io/stage-out: "s3://b/{pod}/?use_path_style=yes"`, okMain),
			`s3 URL parameter use_path_style="yes" is not a boolean`},
		"s3 endpoint with a path": {lintJob(`kdefer.io/stage-out: "s3://b/{pod}/?endpoint=http://minio:9000/x"`, okMain),
			`s3 URL parameter endpoint="http://minio:9000/x" is not a URL of the form scheme://host[:port]`},
		"gs URL parameter of s3, in a policy": {lintPolicy("  stageOut: {url: \"gs://b/{pod}/?region=eu\"}\n"),
			`gs URL parameter "region" is unknown`},
		"unknown stage-in URL parameter": {lintJob(`kdefer.io/stage-out: "s3://b/{pod}/", kdefer.io/stage-in: "azblob://c/in/?regon=x"`, okMain),
			`azblob URL parameter "regon" is unknown`},
		// Globs as the stage step compiles them (storage.Filter, with doublestar).
		"glob the stage step cannot compile": {lintJob(`kdefer.io/stage-out: "s3://b/{pod}/", kdefer.io/include: "*.{root,log"`, okMain),
			`glob "*.{root,log" is malformed`},
		"glob in a policy": {lintPolicy("  stageOut: {url: \"s3://b/{pod}/\", exclude: [\"[abc\"]}\n"),
			`spec.stageOut.exclude[0]: Invalid value: "[abc"`},
		// Containers the apiserver refuses.
		"main container without an image": {lintJob(`kdefer.io/stage-out: "s3://b/{pod}/"`, `{name: main}`),
			`spec.template.spec.containers[0] (main).image: is not set`},
		// Pods that no Job made, as the pod webhook refuses them.
		"pod that never ends": {lintPod(`kdefer.io/stage-out: "s3://b/{pod}/"`, "Always"),
			`spec.restartPolicy: is "Always"`},
		"pod naming a {job} it has not": {lintPod(`kdefer.io/stage-out: "s3://b/{job}/{pod}/"`, "Never"),
			`{job}`},
		"pod with an unknown field": {strings.Replace(lintPod(`kdefer.io/stage-out: "s3://b/{pod}/"`, "Never"), "  restartPolicy:", "  restartPolicey: Never\n  restartPolicy:", 1),
			`unknown field "spec.restartPolicey"`},
		// kdefer's reserved names (v1alpha1's reserved.go): a defer
		// container mounting the defer pod's volumes that are kdefer's, and
		// a template's container named as kdefer's stage-in.
		"defer container mounting kdefer's logs token": {lintPolicy("  stageOut: {url: \"s3://b/{pod}/\"}\n  deferContainers:\n  - {name: d, image: x, volumeMounts: [{name: kdefer-work, mountPath: /w}, {name: kdefer-logs-token, mountPath: /t}]}\n"),
			`spec.deferContainers[0].volumeMounts[1].name: Forbidden: "kdefer-logs-token" is reserved for kdefer`},
		"defer container mounting kdefer's /tmp": {lintPolicy("  stageOut: {url: \"s3://b/{pod}/\"}\n  deferContainers:\n  - {name: d, image: x, volumeMounts: [{name: kdefer-tmp, mountPath: /scratch}]}\n"),
			`spec.deferContainers[0].volumeMounts[0].name: Forbidden: "kdefer-tmp" is reserved for kdefer`},
		"init container named like kdefer's stage-in": {strings.Replace(lintJob(`kdefer.io/stage-out: "s3://b/{pod}/", kdefer.io/credentials: minio`, okMain), "      containers:",
			"      initContainers: [{name: kdefer-stage-in, image: x, envFrom: [{secretRef: {name: minio}}]}]\n      containers:", 1),
			`spec.template.spec.initContainers[0].name: "kdefer-stage-in" is reserved for kdefer`},
		"init container without an image": {strings.Replace(lintJob(`kdefer.io/stage-out: "s3://b/{pod}/"`, okMain), "      containers:", "      initContainers: [{name: setup}]\n      containers:", 1),
			`spec.template.spec.initContainers[0] (setup).image: is not set`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			out, stderr, code := runWithStdin(t, tc.input, "lint", "-f", "-")
			if code != 1 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d (want 1), output lacks %q:\n%s%s", code, tc.want, out, stderr)
			}
		})
	}
}

// Every problem of the input is reported, not the first: a document that
// does not decode does not hide the next one.
func TestLintReportsEveryDocument(t *testing.T) {
	in := lintPolicy("  stageOut: {url: \"s3://b/{pod}/\"}\n  deadline: 3x\n") + "---\n" +
		lintJob(`kdefer.io/stage-out: "s3://b/{pod}/?use_path_style=yes"`, `{name: main}`)
	out, _, code := runWithStdin(t, in, "lint", "-f", "-")
	for _, want := range []string{"DeferPolicy ns/p: 1 problem(s)", "Job ns/j: 2 problem(s)", "is not a boolean", "image: is not set"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("exit %d (want 1), output lacks %q:\n%s", code, want, out)
		}
	}
}

// -f DIR reads the directory's .json, .yaml and .yml files, -R its
// subdirectories too, as kubectl does.
func TestLintDirectory(t *testing.T) {
	out, stderr, code := run(t, "lint", "-f", "testdata/tree")
	if code != 0 || out != "testdata/tree/top.yaml#1: Job physics/sim: ok\n" {
		t.Errorf("lint -f DIR: exit %d:\n%s%s", code, out, stderr)
	}
	out, _, code = run(t, "lint", "-f", "testdata/tree", "-R")
	if code != 1 || !strings.Contains(out, "testdata/tree/nested/bad.yml#1: Job nested: 1 problem(s)") {
		t.Errorf("lint -f DIR -R: exit %d:\n%s", code, out)
	}
}

// The examples the README points to are clean.
func TestLintExamples(t *testing.T) {
	out, stderr, code := run(t, "lint", "-f", "../../examples", "-R")
	if code != 0 || strings.Contains(out, "warning") {
		t.Errorf("kdefer lint -f examples/ -R: exit %d:\n%s%s", code, out, stderr)
	}
}
