//go:build e2e

package e2e

import "fmt"

// JobSet in the e2e cluster (manager_install_test.go: built, pushed,
// installed and restricted to labelled namespaces as every other project's
// manager), as its config/default composes it: its CRD, its JobSet
// webhooks, and its pod webhooks (on pods of a JobSet only, by an
// objectSelector; restricted to the labelled namespaces besides).

// jobsetNamespaceLabel marks the namespaces whose JobSets and pods
// JobSet's webhooks see: the JobSet scenario's.
const jobsetNamespaceLabel = "e2e.kdefer.io/jobset"

// JobSet's listeners, off kdefer's ports and Kueue's (manager_install_test.go).
const (
	jobsetHealthPort  = 8092
	jobsetMetricsPort = 8494
	jobsetWebhookPort = 9544
)

// jobsetConfig is JobSet's Configuration (config.jobset.x-k8s.io/v1alpha1):
// upstream's (internal certificate management) but the ports above and no
// leader election (one replica; it would only delay the first JobSet).
var jobsetConfig = fmt.Sprintf(`apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: :%[1]d
metrics:
  bindAddress: 127.0.0.1:%[2]d
webhook:
  port: %[3]d
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
`, jobsetHealthPort, jobsetMetricsPort, jobsetWebhookPort)

// jobset is JobSet's manager in the e2e cluster.
var jobset = &manager{
	name: "JobSet", env: "JOBSET", namespace: "jobset-system", deployment: "jobset-controller-manager",
	namespaceLabel: jobsetNamespaceLabel,
	kustomization: func(image string) string {
		return fmt.Sprintf(managerKustomizationFormat, "components", image, jobsetHealthPort, jobsetWebhookPort, "jobset", "")
	},
	files: map[string]string{"controller_manager_config.yaml": jobsetConfig},
	// A dry-run create of a JobSet goes through JobSet's defaulting and
	// validating webhooks.
	probe: `apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: e2e-webhook-probe
spec:
  replicatedJobs:
  - name: probe
    template:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: probe
              image: probe
`,
	probeNamespaced: true,
}

// useJobSet installs JobSet in the cluster (once per run) and labels the
// scenario's namespace for JobSet's webhooks.
func (s *scenario) useJobSet() {
	s.t.Helper()
	s.use(jobset)
}
