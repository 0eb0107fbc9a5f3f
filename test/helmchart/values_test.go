package helmchart

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/yaml"

	"github.com/kdefer/kdefer/api/scheme"
)

// everything turns every value of the chart away from its default, so that
// every template branch renders.
const everything = `
namespace: {create: true}
image: {repository: registry.example/kdefer-controller, tag: v9.9.9}
imagePullSecrets: [{name: pull}]
replicas: 3
resources: {requests: {cpu: 50m}}
priorityClassQuota: {enabled: true}
certificates: {mode: cert-manager}
metrics:
  serviceMonitor: {enabled: true, labels: {release: prom}, bindPrometheus: {enabled: true}}
  prometheusRule:
    enabled: true
    groups:
    - name: kdefer
      rules:
      - alert: KdeferDown
        expr: absent(up{job="kdefer-metrics"} == 1)
  grafanaDashboard: {enabled: true, namespace: monitoring, labels: {team: batch}, annotations: {grafana_folder: Batch}}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Exists}]
deferPods:
  image: {repository: registry.example/kdefer-stage}
  priorityClassName: batch-critical
  criticalQuotaNamespaces: [physics, ci]
  maxDeadline: 2h
  prePull: false
webhook: {clientCA: {configMap: apiserver-ca, names: [kube-apiserver]}}
networkPolicy: {enabled: true, webhookFrom: [{ipBlock: {cidr: 10.0.0.10/32}}]}
nodeAgent: {enabled: false}
workers: 8
logLevel: debug
extraArgs: [--kube-api-qps=50]
`

// external are the kinds the chart may render that Kubernetes does not
// serve by itself (cert-manager's, the Prometheus Operator's): decoded
// loosely, since kdefer's scheme does not know them.
var external = []schema.GroupKind{
	{Group: "cert-manager.io", Kind: "Issuer"},
	{Group: "cert-manager.io", Kind: "Certificate"},
	{Group: "monitoring.coreos.com", Kind: "ServiceMonitor"},
	{Group: "monitoring.coreos.com", Kind: "PrometheusRule"},
}

// TestChartObjectsDecodeStrictly: every object the chart renders, with
// every value set, in a namespace other than deploy/'s, is one the
// apiserver accepts as written: a known kind, decoded strictly (an unknown
// or misplaced field is an error, not silently dropped as kubectl apply
// would, with a warning, for a typo).
func TestChartObjectsDecodeStrictly(t *testing.T) {
	s := scheme.New()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Yaml: true, Strict: true})
	for _, v := range append(variants, variant{"everything", "", everything}) {
		t.Run(v.name, func(t *testing.T) {
			for _, u := range decode(t, render(t, v.values)) {
				gvk := u.GroupVersionKind()
				if slices.Contains(external, gvk.GroupKind()) {
					continue
				}
				doc, err := yaml.Marshal(u.Object)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, err := strict.Decode(doc, nil, nil); err != nil {
					t.Errorf("%s: %v", key(u), err)
				}
			}
		})
	}
}

// TestChartValues: what each value does to the objects, where no
// kustomize variant shows it.
func TestChartValues(t *testing.T) {
	objs := index(t, renderIn(t, everything, "batch-infra"))
	dep := objs["Deployment batch-infra/kdefer-controller"]
	if dep == nil {
		t.Fatalf("no Deployment in %v", keys(objs))
	}
	c := dep.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if got, want := c["image"], "registry.example/kdefer-controller:v9.9.9"; got != want {
		t.Errorf("image %v, want %v", got, want)
	}
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	for _, want := range []string{
		"--stage-image=registry.example/kdefer-stage:v0.2.0", // the chart's appVersion
		"--webhook-cert-mode=external",
		"--webhook-cert-namespace=batch-infra",
		"--defer-priority-class=batch-critical",
		"--max-deadline=2h",
		"--pre-pull=false",
		"--workers=8",
		"--log-level=debug",
		"--kube-api-qps=50",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("controller args %q lack %s", args, want)
		}
	}
	for _, k := range []string{
		"ResourceQuota batch-infra/kdefer-controller-priority",
		"ResourceQuota physics/kdefer-critical-pods",
		"ResourceQuota ci/kdefer-critical-pods",
		"ServiceMonitor batch-infra/kdefer-controller",
		"ClusterRoleBinding /kdefer-metrics-reader",
		"PrometheusRule batch-infra/kdefer",
		"Certificate batch-infra/kdefer-webhook-cert",
	} {
		if objs[k] == nil {
			t.Errorf("no %s in %v", k, keys(objs))
		}
	}
	// The defer pods' quota names the class they run at.
	q := objs["ResourceQuota physics/kdefer-critical-pods"]
	if got := q.Object["spec"].(map[string]any)["scopeSelector"].(map[string]any)["matchExpressions"].([]any)[0].(map[string]any)["values"]; !slices.Equal(toStrings(got), []string{"batch-critical"}) {
		t.Errorf("defer pods' quota scope %v, want [batch-critical]", got)
	}
	// Everything namespaced is in the release namespace, and names kdefer's
	// ServiceAccount, Service and certificate there: the role bindings'
	// subjects, the webhooks' Service, the admission policy's requester.
	for k, u := range objs {
		doc, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(doc), "kdefer-system") {
			t.Errorf("%s still names kdefer-system:\n%s", k, doc)
		}
	}
	vap, err := yaml.Marshal(objs["ValidatingAdmissionPolicy /kdefer-retain-work-volumes"].Object)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(vap), "system:serviceaccount:batch-infra:kdefer-controller") || strings.Contains(string(vap), "kdefer-system") {
		t.Errorf("the admission policy does not name kdefer's ServiceAccount in batch-infra:\n%s", vap)
	}
}

// TestChartRefuses: values that cannot work fail the install, with why.
func TestChartRefuses(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{"replicas: 2\nleaderElection: {enabled: false}", "needs leaderElection.enabled"},
		// values.schema.json refuses these before the templates run.
		{"certificates: {mode: vault}", "value must be one of 'self-signed', 'cert-manager'"},
		{"replicas: two", "at '/replicas': got string, want integer"},
		{"nodeAgent: {enable: false}", "additional properties 'enable' not allowed"},
		{"networkPolicy: {enabled: true}", "networkPolicy.webhookFrom is empty"},
	} {
		_, err := renderErr(t, tc.values, namespace)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %q: error %v, want one saying %q", tc.values, err, tc.want)
		}
	}
}

func toStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

// TestChartLabels: every object the chart makes, with every value set,
// carries the standard labels, its component among them; the selectors are
// deploy/'s (a Deployment's cannot change on upgrade).
func TestChartLabels(t *testing.T) {
	for _, v := range append(variants, variant{"everything", "", everything}) {
		t.Run(v.name, func(t *testing.T) {
			for _, u := range decode(t, render(t, v.values)) {
				l := u.GetLabels()
				for k, want := range map[string]string{
					"app.kubernetes.io/name":       "kdefer",
					"app.kubernetes.io/instance":   "kdefer",
					"app.kubernetes.io/version":    "v0.2.0",
					"app.kubernetes.io/part-of":    "kdefer",
					"app.kubernetes.io/managed-by": "Helm",
					"helm.sh/chart":                "kdefer-0.2.0",
				} {
					if l[k] != want {
						t.Errorf("%s: label %s %q, want %q", key(u), k, l[k], want)
					}
				}
				if l["app.kubernetes.io/component"] == "" {
					t.Errorf("%s: no app.kubernetes.io/component label", key(u))
				}
			}
		})
	}
	objs := index(t, render(t, everything))
	controller := map[string]any{"app.kubernetes.io/name": "kdefer", "app.kubernetes.io/component": "controller"}
	for k, path := range map[string][]string{
		"Deployment kdefer-system/kdefer-controller":          {"spec", "selector", "matchLabels"},
		"PodDisruptionBudget kdefer-system/kdefer-controller": {"spec", "selector", "matchLabels"},
		"Service kdefer-system/kdefer-webhook":                {"spec", "selector"},
		"Service kdefer-system/kdefer-metrics":                {"spec", "selector"},
	} {
		got, _, err := unstructured.NestedMap(objs[k].Object, path...)
		if err != nil || !reflect.DeepEqual(got, controller) {
			t.Errorf("%s: selector %v (%v), want %v", k, got, err, controller)
		}
	}
}
