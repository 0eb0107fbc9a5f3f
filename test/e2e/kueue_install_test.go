//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kueue in the e2e cluster (manager_install_test.go: built, pushed,
// installed and restricted to labelled namespaces as every other project's
// manager): only the batch/job integration runs, and
// manageJobsWithoutQueueName is false: a Job without a queue name is not
// Kueue's.

// kueueNamespaceLabel marks the namespaces whose Jobs and pods Kueue's
// webhooks see: the Kueue scenarios'.
const kueueNamespaceLabel = "e2e.kdefer.io/kueue"

// Kueue's listeners, off kdefer's ports (manager_install_test.go).
const (
	kueueHealthPort  = 8091
	kueueMetricsPort = 8493
	kueueWebhookPort = 9543
)

// kueueConfig is Kueue's Configuration (config.kueue.x-k8s.io/v1beta2):
// upstream's defaults but the ports above, the Job integration alone, no
// leader election (one replica; it would only delay the first admission),
// and no visibility server (its APIService is not installed: an aggregated
// API nobody serves would stall every namespace deletion's discovery).
var kueueConfig = fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :%[1]d
metrics:
  bindAddress: 127.0.0.1:%[2]d
webhook:
  port: %[3]d
leaderElection:
  leaderElect: false
manageJobsWithoutQueueName: false
featureGates:
  VisibilityOnDemand: false
integrations:
  frameworks:
  - batch/job
`, kueueHealthPort, kueueMetricsPort, kueueWebhookPort)

// kueueSelectorLabels: Kueue's config/default also selects its pods by
// control-plane.
const kueueSelectorLabels = `- pairs:
    control-plane: controller-manager
  includeSelectors: true
`

// kueue is Kueue's manager in the e2e cluster.
var kueue = &manager{
	name: "Kueue", env: "KUEUE", namespace: "kueue-system", deployment: "kueue-controller-manager",
	namespaceLabel: kueueNamespaceLabel,
	kustomization: func(image string) string {
		return fmt.Sprintf(managerKustomizationFormat, "components", image, kueueHealthPort, kueueWebhookPort, "kueue", kueueSelectorLabels)
	},
	files: map[string]string{"controller_manager_config.yaml": kueueConfig},
	// A dry-run create goes through Kueue's defaulting and validating
	// webhooks for ResourceFlavors.
	probe: `apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: e2e-webhook-probe
`,
}

// useKueue installs Kueue in the cluster (once per run) and labels the
// scenario's namespace for Kueue's webhooks.
func (s *scenario) useKueue() {
	s.t.Helper()
	s.use(kueue)
}

// createKueue creates a Kueue object of the scenario and deletes it when
// the scenario ends (cluster-scoped ones outlive the namespace).
func (s *scenario) createKueue(manifest string) {
	s.t.Helper()
	u := manifestObject(manifest)
	if u.GetNamespace() == "" && strings.HasPrefix(u.GetKind(), "Local") {
		u.SetNamespace(s.ns)
	}
	if err := s.env.Client.Create(s.ctx, u); err != nil {
		s.t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	if u.GetNamespace() == "" {
		s.t.Cleanup(func() {
			if err := s.env.Client.Delete(context.Background(), u); client.IgnoreNotFound(err) != nil {
				s.t.Logf("delete %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		})
	}
}
