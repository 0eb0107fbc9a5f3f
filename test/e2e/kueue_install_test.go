//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/kdefer/kdefer/test/clusterenv"
)

// Kueue in the e2e cluster: its manager built from the Go module proxy
// (test/tools/install.sh kueue), its image pushed to the test registry with
// kdefer's (test/e2e/run.sh sets KDEFER_E2E_KUEUE_IMAGE and
// KDEFER_E2E_KUEUE_CONFIG, the module's config/components), installed once
// per run by the first Kueue scenario, from Kueue's own manifests rendered
// with kustomize. Only the batch/job integration runs, and
// manageJobsWithoutQueueName is false: a Job without a queue name is not
// Kueue's. Kueue's webhooks answer only namespaces labelled
// kueueNamespaceLabel (failurePolicy Fail: elsewhere a Kueue being
// installed, or restarting, would refuse the other scenarios' pods and
// Jobs).

// kueueNamespaceLabel marks the namespaces whose Jobs and pods Kueue's
// webhooks see: the Kueue scenarios'.
const kueueNamespaceLabel = "e2e.kdefer.io/kueue"

// Kueue's manager runs in the node's network, as kdefer's does on the
// local cluster: no kube-proxy routes the kubernetes Service here, so a pod
// reaches the apiserver only at the node's loopback (KUBERNETES_SERVICE_HOST
// 127.0.0.1, port 6443, ../shared/facts/local-cluster.md). Its listeners
// move off the ports kdefer's manager holds there (8081, 8443, 9443, 9444).
// The apiserver still calls its webhooks through their Service
// (--enable-aggregator-routing: at the endpoint, the node's address and
// kueueWebhookPort).
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

// kueueKustomization composes Kueue's components as its config/default
// does (namespace kueue-system, prefix kueue-: the names its internal
// certificate management looks for), without the visibility server and the
// metrics Service, with the Configuration above, the image pushed to the
// test registry, and the manager in the node's network.
const kueueKustomization = `namespace: kueue-system
namePrefix: kueue-
labels:
- pairs:
    app.kubernetes.io/name: kueue
  includeTemplates: true
- pairs:
    control-plane: controller-manager
  includeSelectors: true
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
            # Upstream asks 500m and 512Mi: a quarter of the 2-core node
            # the parallel scenarios share.
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
              secretName: kueue-webhook-server-cert
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

// renderKueue builds Kueue's manifests from the module's
// config/components (dir) for image, and restricts every webhook to the
// namespaces labelled kueueNamespaceLabel.
func renderKueue(dir, image string) ([]*unstructured.Unstructured, error) {
	tmp, err := os.MkdirTemp("", "kueue-kustomize-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	// Kustomize takes no absolute directories: the components are copied
	// beside the kustomization.
	if err := os.CopyFS(filepath.Join(tmp, "components"), os.DirFS(filepath.Join(dir, "components"))); err != nil {
		return nil, err
	}
	k := fmt.Sprintf(kueueKustomization, "components", image, kueueHealthPort, kueueWebhookPort)
	for name, data := range map[string]string{"kustomization.yaml": k, "controller_manager_config.yaml": kueueConfig} {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(data), 0o644); err != nil {
			return nil, err
		}
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), tmp)
	if err != nil {
		return nil, fmt.Errorf("kustomize Kueue's config/components: %w", err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: obj}
		if strings.HasSuffix(u.GetKind(), "WebhookConfiguration") {
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			for _, h := range hooks {
				h.(map[string]any)["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{kueueNamespaceLabel: "true"}}
			}
			if err := unstructured.SetNestedSlice(u.Object, hooks, "webhooks"); err != nil {
				return nil, err
			}
		}
		out = append(out, u)
	}
	return out, nil
}

var (
	kueueOnce sync.Once
	kueueErr  error
)

// useKueue installs Kueue in the cluster (once per run) and labels the
// scenario's namespace for Kueue's webhooks.
func (s *scenario) useKueue() {
	s.t.Helper()
	if why := os.Getenv("KDEFER_E2E_KUEUE_SKIP"); why != "" {
		s.t.Skip(why)
	}
	image, dir := os.Getenv("KDEFER_E2E_KUEUE_IMAGE"), os.Getenv("KDEFER_E2E_KUEUE_CONFIG")
	if image == "" || dir == "" {
		msg := "no Kueue image and manifests (KDEFER_E2E_KUEUE_IMAGE, KDEFER_E2E_KUEUE_CONFIG: test/e2e/run.sh sets them after test/tools/install.sh kueue)"
		if os.Getenv("KDEFER_REQUIRE_TOOLS") == "1" {
			s.t.Fatal(msg)
		}
		s.t.Skip(msg)
	}
	kueueOnce.Do(func() {
		t0 := time.Now()
		kueueErr = installKueue(context.Background(), s.env, dir, image)
		s.logf("Kueue installed and admitting in %s (%s)", time.Since(t0).Round(100*time.Millisecond), image)
	})
	if kueueErr != nil {
		s.t.Fatalf("installing Kueue: %v", kueueErr)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, kueueNamespaceLabel)
	if _, err := s.env.Clientset.CoreV1().Namespaces().Patch(s.ctx, s.ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// installKueue applies the rendered manifests (CRDs first) and waits until
// Kueue's webhooks answer: its internal certificate management has written
// the serving certificate and the CA bundles, and the manager serves them.
func installKueue(ctx context.Context, env *clusterenv.Env, dir, image string) error {
	objs, err := renderKueue(dir, image)
	if err != nil {
		return err
	}
	apply := func(u *unstructured.Unstructured) error {
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kdefer-e2e"), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		return nil
	}
	// Namespaces, then CRDs (established before anything of their kinds),
	// then the rest: kustomize keeps the components' order, which puts
	// the ServiceAccount (rbac) before the Namespace (manager).
	pass := func(u *unstructured.Unstructured) int {
		switch u.GetKind() {
		case "Namespace":
			return 0
		case "CustomResourceDefinition":
			return 1
		}
		return 2
	}
	for p := range 3 {
		for _, u := range objs {
			if pass(u) == p {
				if err := apply(u); err != nil {
					return err
				}
			}
		}
		if p == 1 {
			if err := waitCRDsEstablished(ctx, env, objs); err != nil {
				return err
			}
		}
	}
	// A dry-run create goes through Kueue's defaulting and validating
	// webhooks for ResourceFlavors: it succeeds once they answer.
	probe := kueueObject(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: e2e-webhook-probe
`)
	var last error
	err = clusterenv.WaitFor(ctx, 3*time.Minute, "Kueue's webhooks to answer", func(ctx context.Context) (bool, error) {
		last = env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return last == nil || apierrors.IsAlreadyExists(last), nil
	})
	if err != nil {
		out, _ := kubectl(context.Background(), "-n", "kueue-system", "logs", "deploy/kueue-controller-manager", "--tail=40")
		pods, _ := kubectl(context.Background(), "-n", "kueue-system", "get", "pods", "-o", "wide")
		return fmt.Errorf("%w (last: %v)\n%s\n%s", err, last, pods, out)
	}
	return nil
}

func waitCRDsEstablished(ctx context.Context, env *clusterenv.Env, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		err := clusterenv.WaitFor(ctx, time.Minute, "CRD "+u.GetName()+" established", func(ctx context.Context) (bool, error) {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(u.GroupVersionKind())
			if err := env.Client.Get(ctx, client.ObjectKey{Name: u.GetName()}, crd); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				if m := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// kueueObject is a Kueue object written as its YAML.
func kueueObject(manifest string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		panic(fmt.Sprintf("%v:\n%s", err, manifest))
	}
	return u
}

// createKueue creates a Kueue object of the scenario and deletes it when
// the scenario ends (cluster-scoped ones outlive the namespace).
func (s *scenario) createKueue(manifest string) {
	s.t.Helper()
	u := kueueObject(manifest)
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
