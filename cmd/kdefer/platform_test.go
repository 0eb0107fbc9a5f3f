package main

import (
	"strings"
	"testing"
)

// platformInput is a platform team's ClusterDeferPolicy, the namespaces it
// selects and does not, and plain Jobs (no kdefer label or annotation).
const platformInput = `apiVersion: kdefer.io/v1alpha1
kind: ClusterDeferPolicy
metadata: {name: keep-outputs}
spec:
  namespaceSelector: {matchLabels: {site: physics}}
  stageOut: {url: "s3://results/{namespace}/{job}/{pod}/"}
  credentials: {name: platform-s3}
---
apiVersion: v1
kind: Namespace
metadata: {name: physics-a, labels: {site: physics}}
---
apiVersion: v1
kind: Namespace
metadata: {name: elsewhere}
---
apiVersion: batch/v1
kind: Job
metadata: {name: plain, namespace: physics-a}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: x}]}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: outside, namespace: elsewhere}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: x}]}}}
`

// TestRenderClusterPolicy: kdefer render arms a plain Job of a namespace a
// ClusterDeferPolicy of the input selects, as the webhooks do (label,
// recorded policy, the copy of its credentials), and leaves a Job of
// another namespace as written.
func TestRenderClusterPolicy(t *testing.T) {
	out, stderr, code := runWithStdin(t, platformInput, "render", "-f", "-", "--stage-image", "img:test")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	docs := strings.Split(out, "\n---\n")
	if len(docs) != 5 {
		t.Fatalf("%d documents out, want 5:\n%s", len(docs), out)
	}
	plain, outside := docs[3], docs[4]
	for _, want := range []string{"kdefer.io/enabled: \"true\"", "kdefer.io/cluster-policy: keep-outputs", "kdefer.io/rendered", "kdefer.io/defer"} {
		if !strings.Contains(plain, want) {
			t.Errorf("the selected Job lacks %q:\n%s", want, plain)
		}
	}
	if strings.Contains(outside, "kdefer.io") {
		t.Errorf("the Job of a namespace the policy does not select was changed:\n%s", outside)
	}
}

// TestLintClusterPolicy: kdefer lint checks the Jobs a ClusterDeferPolicy
// selects, refuses an opt-out under a locked one and two that select the
// same Job, and warns when it cannot see a Job's namespace.
func TestLintClusterPolicy(t *testing.T) {
	in := strings.Replace(platformInput, "  credentials: {name: platform-s3}\n", "  credentials: {name: platform-s3}\n  locked: [stageOut]\n", 1) + `---
apiVersion: batch/v1
kind: Job
metadata: {name: skip, namespace: physics-a, annotations: {kdefer.io/skip: "true"}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: x}]}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: nowhere, namespace: unknown}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: x}]}}}
`
	out, _, code := runWithStdin(t, in, "lint", "-f", "-")
	if code != 1 {
		t.Errorf("exit %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{
		"Job physics-a/plain: ok",
		"Job physics-a/skip: 1 problem(s)",
		`error: annotation kdefer.io/skip: opts out, but ClusterDeferPolicy "keep-outputs" selects namespace physics-a and locks stageOut (spec.locked)`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lint output does not contain %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "elsewhere/outside") || strings.Contains(out, "unknown/nowhere") {
		t.Errorf("lint reports Jobs no policy selects:\n%s", out)
	}

	two := platformInput + `---
apiVersion: kdefer.io/v1alpha1
kind: ClusterDeferPolicy
metadata: {name: also}
spec:
  namespaceSelector: {}
  stageOut: {url: "s3://other/{pod}/"}
`
	out, _, code = runWithStdin(t, two, "lint", "-f", "-")
	if code != 1 || !strings.Contains(out, "2 ClusterDeferPolicies select this Job of namespace physics-a: also, keep-outputs; fix: narrow") {
		t.Errorf("exit %d, want 1 and the two policies named:\n%s", code, out)
	}
	out, _, _ = runWithStdin(t, strings.Replace(platformInput, "namespace: physics-a}", "namespace: missing}", 1)+`---
apiVersion: kdefer.io/v1alpha1
kind: ClusterDeferPolicy
metadata: {name: everywhere}
spec:
  namespaceSelector: {}
  jobSelector: {matchLabels: {app: x}}
  stageOut: {url: "s3://other/{pod}/"}
---
apiVersion: batch/v1
kind: Job
metadata: {name: labelled, namespace: missing, labels: {app: x}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: x}]}}}
`, "lint", "-f", "-")
	if !strings.Contains(out, "warning: the Job's namespace missing is not in the input") {
		t.Errorf("no warning about the namespace missing from the input:\n%s", out)
	}
}
