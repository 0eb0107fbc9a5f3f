package main

import (
	"strings"
	"testing"
)

// nsDefaultInput is a namespace's locked default, another policy, and Jobs
// that name none, the other one, or set a locked annotation.
const nsDefaultInput = `apiVersion: kdefer.io/v1alpha1
kind: DeferPolicy
metadata: {name: platform, namespace: team-a}
spec:
  namespaceDefault: true
  locked: [stageIn, credentials]
  stageOut: {url: "s3://results/{namespace}/{job}/{pod}/"}
  stageIn: [{url: "s3://approved-inputs/"}]
  credentials: {name: platform-s3}
---
apiVersion: kdefer.io/v1alpha1
kind: DeferPolicy
metadata: {name: team, namespace: team-a}
spec:
  stageOut: {url: "s3://team/{pod}/"}
---
apiVersion: batch/v1
kind: Job
metadata: {name: plain, namespace: team-a, labels: {kdefer.io/enabled: "true"}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: x}]}}}
`

// TestRenderNamespaceDefault: kdefer render renders a Job that names no
// policy with its namespace's default from the input.
func TestRenderNamespaceDefault(t *testing.T) {
	out, stderr, code := runWithStdin(t, nsDefaultInput, "render", "-f", "-", "--stage-image", "img:test")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "s3://approved-inputs/") || !strings.Contains(out, "name: platform-s3") {
		t.Errorf("the Job is not rendered with the default's stage-in and credentials:\n%s", out)
	}
}

// TestLintNamespaceDefault: kdefer lint refuses what the webhooks refuse
// under a locked default: another policy named, a locked annotation set.
func TestLintNamespaceDefault(t *testing.T) {
	in := nsDefaultInput + `---
apiVersion: batch/v1
kind: Job
metadata: {name: other, namespace: team-a, labels: {kdefer.io/enabled: "true"}, annotations: {kdefer.io/policy: team}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: x}]}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: own-secret, namespace: team-a, labels: {kdefer.io/enabled: "true"}, annotations: {kdefer.io/credentials: mine}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: x}]}}}
`
	out, _, code := runWithStdin(t, in, "lint", "-f", "-")
	if code != 1 {
		t.Errorf("exit %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{
		"Job team-a/plain: ok",
		`Job team-a/other: 1 problem(s)`,
		`error: annotation kdefer.io/policy: names DeferPolicy "team", but DeferPolicy "platform" is the default of namespace team-a (spec.namespaceDefault) and locks stageIn, credentials (spec.locked)`,
		`Job team-a/own-secret: 1 problem(s)`,
		"error: annotation kdefer.io/credentials: overrides the DeferPolicy's credentials, which the policy locks (spec.locked)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lint output does not contain %q:\n%s", want, out)
		}
	}
}
