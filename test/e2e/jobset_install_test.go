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

// jobsetKustomizationFormat composes JobSet's components as its
// config/default does (namespace jobset-system, prefix jobset-: the names
// its internal certificate management looks for), without the metrics
// Service, with the Configuration above, the image pushed to the test
// registry (%[2]s), and the manager in the node's network; %[1]s is the
// components' directory, %[3]d and %[4]d the health and webhook ports.
const jobsetKustomizationFormat = `namespace: jobset-system
namePrefix: jobset-
labels:
- pairs:
    app.kubernetes.io/name: jobset
  includeTemplates: true
resources:
- %[1]s/crd
- %[1]s/rbac
- %[1]s/manager
- %[1]s/internalcert
- %[1]s/webhook
configMapGenerator:
- name: manager-config
  behavior: replace
  files:
  - controller_manager_config.yaml
  options:
    disableNameSuffixHash: true
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: controller-manager
      namespace: system
    spec:
      template:
        spec:
          hostNetwork: true
          dnsPolicy: ClusterFirstWithHostNet
          containers:
          - name: manager
            image: %[2]s
            imagePullPolicy: IfNotPresent
            args:
            - --config=/controller_manager_config.yaml
            - --zap-log-level=2
            env:
            - name: KUBERNETES_SERVICE_HOST
              value: 127.0.0.1
            - name: KUBERNETES_SERVICE_PORT
              value: "6443"
            livenessProbe:
              httpGet:
                port: %[3]d
            readinessProbe:
              httpGet:
                port: %[3]d
            # Upstream asks 500m: a quarter of the 2-core node the
            # parallel scenarios share.
            resources:
              requests:
                cpu: 10m
                memory: 64Mi
            ports:
            - containerPort: %[4]d
              name: webhook-server
              protocol: TCP
            volumeMounts:
            - name: manager-config
              mountPath: /controller_manager_config.yaml
              subPath: controller_manager_config.yaml
            - name: cert
              mountPath: /tmp/k8s-webhook-server/serving-certs
              readOnly: true
          volumes:
          - name: manager-config
            configMap:
              name: manager-config
          - name: cert
            secret:
              defaultMode: 420
              secretName: jobset-webhook-server-cert
- patch: |-
    apiVersion: v1
    kind: Service
    metadata:
      name: webhook-service
      namespace: system
    spec:
      ports:
      - port: 443
        protocol: TCP
        targetPort: %[4]d
`

// jobset is JobSet's manager in the e2e cluster.
var jobset = &manager{
	name: "JobSet", env: "JOBSET", namespace: "jobset-system", deployment: "jobset-controller-manager",
	namespaceLabel: jobsetNamespaceLabel,
	kustomization: func(image string) string {
		return fmt.Sprintf(jobsetKustomizationFormat, "components", image, jobsetHealthPort, jobsetWebhookPort)
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
