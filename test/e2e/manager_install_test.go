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

// Other projects' controllers in the e2e cluster (Kueue, JobSet): each
// manager built from the Go module proxy (test/tools/install.sh NAME), its
// image pushed to the test registry with kdefer's (test/e2e/run.sh sets
// KDEFER_E2E_NAME_IMAGE and KDEFER_E2E_NAME_CONFIG, the module's
// config/components), installed once per run by the first scenario that
// uses it, from the project's own manifests rendered with kustomize. Its
// webhooks answer only namespaces labelled with its namespaceLabel
// (failurePolicy Fail: elsewhere a manager being installed, or restarting,
// would refuse the other scenarios' pods and Jobs).
//
// Each manager runs in the node's network, as kdefer's does on the local
// cluster: no kube-proxy routes the kubernetes Service here, so a pod
// reaches the apiserver only at the node's loopback (KUBERNETES_SERVICE_HOST
// 127.0.0.1, port 6443, ../shared/facts/local-cluster.md). Their listeners
// move off the ports kdefer's manager holds there (8081, 8443, 9443, 9444)
// and off each other's. The apiserver still calls their webhooks through
// their Services (--enable-aggregator-routing: at the endpoint, the node's
// address and the webhook port), whose targetPort each kustomization moves.
type manager struct {
	name           string // the project, in messages: "Kueue"
	env            string // its run.sh variables: KDEFER_E2E_<env>_IMAGE, _CONFIG, _SKIP
	namespace      string // where it runs: "kueue-system"
	deployment     string // its Deployment there
	namespaceLabel string // marks the namespaces its webhooks see
	// kustomization composes the module's config/components (copied to
	// components/ beside it) with image; files are written beside it too.
	kustomization func(image string) string
	files         map[string]string
	// probe is an object of the project whose dry-run create goes through
	// its webhooks: it succeeds once they answer. A namespaced probe is made
	// in the installing scenario's namespace, labelled by then: the webhooks
	// see no other (in any other namespace, the probe would pass at once).
	probe           string
	probeNamespaced bool

	once sync.Once
	err  error
}

// use installs m in the cluster (once per run) and labels the scenario's
// namespace for m's webhooks.
func (s *scenario) use(m *manager) {
	s.t.Helper()
	prefix := "KDEFER_E2E_" + m.env + "_"
	if why := os.Getenv(prefix + "SKIP"); why != "" {
		s.t.Skip(why)
	}
	image, dir := os.Getenv(prefix+"IMAGE"), os.Getenv(prefix+"CONFIG")
	if image == "" || dir == "" {
		msg := fmt.Sprintf("no %s image and manifests (%sIMAGE, %sCONFIG: test/e2e/run.sh sets them after test/tools/install.sh %s)",
			m.name, prefix, prefix, strings.ToLower(m.env))
		if os.Getenv("KDEFER_REQUIRE_TOOLS") == "1" {
			s.t.Fatal(msg)
		}
		s.t.Skip(msg)
	}
	// Labelled first: the install's probe may need it (see probe).
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, m.namespaceLabel)
	if _, err := s.env.Clientset.CoreV1().Namespaces().Patch(s.ctx, s.ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		s.t.Fatal(err)
	}
	m.once.Do(func() {
		t0 := time.Now()
		m.err = m.install(context.Background(), s.env, dir, image, s.ns)
		s.logf("%s installed and answering in %s (%s)", m.name, time.Since(t0).Round(100*time.Millisecond), image)
	})
	if m.err != nil {
		s.t.Fatalf("installing %s: %v", m.name, m.err)
	}
}

// render builds m's manifests from the module's config/components (dir)
// for image, and restricts every webhook to the namespaces labelled
// m.namespaceLabel.
func (m *manager) render(dir, image string) ([]*unstructured.Unstructured, error) {
	tmp, err := os.MkdirTemp("", "manager-kustomize-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	// Kustomize takes no absolute directories: the components are copied
	// beside the kustomization.
	if err := os.CopyFS(filepath.Join(tmp, "components"), os.DirFS(filepath.Join(dir, "components"))); err != nil {
		return nil, err
	}
	files := map[string]string{"kustomization.yaml": m.kustomization(image)}
	for name, data := range m.files {
		files[name] = data
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(data), 0o644); err != nil {
			return nil, err
		}
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), tmp)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s's config/components: %w", m.name, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		obj, err := r.Map()
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: obj}
		if strings.HasSuffix(u.GetKind(), "WebhookConfiguration") {
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			for _, h := range hooks {
				h.(map[string]any)["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{m.namespaceLabel: "true"}}
			}
			if err := unstructured.SetNestedSlice(u.Object, hooks, "webhooks"); err != nil {
				return nil, err
			}
		}
		out = append(out, u)
	}
	return out, nil
}

// install applies the rendered manifests (CRDs first) and waits until m's
// webhooks answer (in namespace ns, labelled for them, for a namespaced
// probe): its internal certificate management has written the serving
// certificate and the CA bundles, and the manager serves them.
func (m *manager) install(ctx context.Context, env *clusterenv.Env, dir, image, ns string) error {
	objs, err := m.render(dir, image)
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
	probe := manifestObject(m.probe)
	if m.probeNamespaced {
		probe.SetNamespace(ns)
	}
	var last error
	err = clusterenv.WaitFor(ctx, 3*time.Minute, m.name+"'s webhooks to answer", func(ctx context.Context) (bool, error) {
		last = env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return last == nil || apierrors.IsAlreadyExists(last), nil
	})
	if err != nil {
		out, _ := kubectl(context.Background(), "-n", m.namespace, "logs", "deploy/"+m.deployment, "--tail=40")
		pods, _ := kubectl(context.Background(), "-n", m.namespace, "get", "pods", "-o", "wide")
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

// manifestObject is an object written as its YAML.
func manifestObject(manifest string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		panic(fmt.Sprintf("%v:\n%s", err, manifest))
	}
	return u
}

// managerKustomizationFormat composes a project's config/components as its
// config/default does (namespace %[5]s-system, prefix %[5]s-: the names its
// internal certificate management looks for; %[6]s: labels of its own),
// without its metrics Service (nor Kueue's visibility server), with its
// Configuration (controller_manager_config.yaml beside it), the image pushed
// to the test registry (%[2]s), and the manager in the node's network;
// %[1]s is the components' directory, %[3]d and %[4]d the health and
// webhook ports.
const managerKustomizationFormat = `namespace: %[5]s-system
namePrefix: %[5]s-
labels:
- pairs:
    app.kubernetes.io/name: %[5]s
  includeTemplates: true
%[6]sresources:
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
            # Upstream asks 500m (and 512Mi): a quarter of the 2-core
            # node the parallel scenarios share.
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
              secretName: %[5]s-webhook-server-cert
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
