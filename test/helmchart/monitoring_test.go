package helmchart

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPrometheusRuleIsDeploys: the chart's PrometheusRule is
// deploy/monitoring/prometheusrule.yaml (one source of kdefer's alerts),
// in the release's namespace, with the values' labels added; groups set in
// the values replace its groups.
func TestPrometheusRuleIsDeploys(t *testing.T) {
	want := decode(t, []byte(mustRead("deploy/monitoring/prometheusrule.yaml")))[0]
	want.SetNamespace("batch-infra")
	want.SetLabels(map[string]string{"app.kubernetes.io/name": "kdefer", "release": "prom"})

	got := index(t, renderIn(t, "metrics: {prometheusRule: {enabled: true, labels: {release: prom}}}", "batch-infra"))["PrometheusRule batch-infra/kdefer"]
	if got == nil {
		t.Fatal("no PrometheusRule batch-infra/kdefer with metrics.prometheusRule.enabled")
	}
	if diff := cmp.Diff(want.Object, withoutHelmLabels(got, want).Object); diff != "" {
		t.Errorf("the chart's PrometheusRule (+) is not deploy/monitoring/prometheusrule.yaml (-):\n%s", diff)
	}

	// groups in the values replace the file's (the "everything" values).
	got = index(t, render(t, everything))["PrometheusRule kdefer-system/kdefer"]
	groups := got.Object["spec"].(map[string]any)["groups"].([]any)
	rules := groups[0].(map[string]any)["rules"].([]any)
	if len(groups) != 1 || len(rules) != 1 || rules[0].(map[string]any)["alert"] != "KdeferDown" {
		t.Errorf("groups %v, want the values' one group with alert KdeferDown", groups)
	}
}

// TestGrafanaDashboardIsDeploys: the chart's dashboard ConfigMap is
// deploy/monitoring/grafana-dashboard.yaml (one source of the dashboard),
// in the release's namespace or the values' one, labelled for the Grafana
// sidecar, with the values' labels and annotations added.
func TestGrafanaDashboardIsDeploys(t *testing.T) {
	want := decode(t, []byte(mustRead("deploy/monitoring/grafana-dashboard.yaml")))[0]
	want.SetNamespace("batch-infra")
	want.SetLabels(map[string]string{"app.kubernetes.io/name": "kdefer", "grafana_dashboard": "1", "team": "batch"})

	got := index(t, renderIn(t, "metrics: {grafanaDashboard: {enabled: true, labels: {team: batch}}}", "batch-infra"))["ConfigMap batch-infra/kdefer-grafana-dashboard"]
	if got == nil {
		t.Fatal("no ConfigMap batch-infra/kdefer-grafana-dashboard with metrics.grafanaDashboard.enabled")
	}
	if diff := cmp.Diff(want.Object, withoutHelmLabels(got, want).Object); diff != "" {
		t.Errorf("the chart's dashboard (+) is not deploy/monitoring/grafana-dashboard.yaml (-):\n%s", diff)
	}

	// Where the sidecar looks, with a folder annotation (the "everything" values).
	got = index(t, render(t, everything))["ConfigMap monitoring/kdefer-grafana-dashboard"]
	if got == nil || got.GetAnnotations()["grafana_folder"] != "Batch" || got.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("with namespace monitoring and a folder annotation: %v", got)
	}
	if _, ok := index(t, render(t, ""))["ConfigMap kdefer-system/kdefer-grafana-dashboard"]; ok {
		t.Error("the dashboard is installed by default; want it behind metrics.grafanaDashboard.enabled")
	}
}
