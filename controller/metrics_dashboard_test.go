package controller

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// exportedMetric is one metric the controller registers.
type exportedMetric struct {
	histogram bool     // exposed as NAME_bucket, NAME_sum and NAME_count
	labels    []string // its variable labels
}

// exportedMetrics are the metrics kdefer-controller registers (collectors),
// by name.
func exportedMetrics(t *testing.T) map[string]exportedMetric {
	t.Helper()
	out := map[string]exportedMetric{}
	desc := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	for _, c := range collectors() {
		var histogram bool
		switch c.(type) {
		case prometheus.Histogram, *prometheus.HistogramVec:
			histogram = true
		}
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := desc.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the name and labels of %s", d)
			}
			var labels []string
			if m[2] != "" {
				labels = strings.Split(m[2], ",")
			}
			out[m[1]] = exportedMetric{histogram: histogram, labels: labels}
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d metrics read from the collectors: %v", len(out), out)
	}
	return out
}

// promQLNames returns the metric names an expression selects and the labels
// its grouping clauses name. Not a PromQL parser: enough for the dashboard's
// expressions (aggregations, functions, ranges, Grafana variables).
func promQLNames(expr string) (metrics, labels []string) {
	// Strings, ranges, label matchers, numbers and durations (offset 1h).
	for _, strip := range []string{`"[^"]*"`, `\[[^\]]*\]`, `\{[^}]*\}`, `\b[0-9][0-9.]*[A-Za-z]*`} {
		expr = regexp.MustCompile(strip).ReplaceAllString(expr, " ")
	}
	grouping := regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	for _, m := range grouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
	}
	expr = grouping.ReplaceAllString(expr, " ")
	ident := regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	keywords := []string{"and", "or", "unless", "bool", "offset"}
	for _, m := range ident.FindAllString(expr, -1) {
		if strings.HasSuffix(m, "(") || slices.Contains(keywords, m) { // a function or an aggregation
			continue
		}
		metrics = append(metrics, m)
	}
	return metrics, labels
}

// TestDashboardMetricsExist: every expression of the shipped Grafana
// dashboard (deploy/monitoring/grafana-dashboard.yaml, which the chart
// installs as it is) selects only metrics the controller registers, a
// histogram only by its _bucket, _sum or _count series, and groups only by
// labels those metrics have: a rename cannot silently empty a panel.
func TestDashboardMetricsExist(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deploy", "monitoring", "grafana-dashboard.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data["kdefer.json"]), &dash); err != nil {
		t.Fatalf("kdefer.json: %v", err)
	}
	exported := exportedMetrics(t)
	if len(dash.Panels) == 0 {
		t.Fatal("no panels")
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, q := range p.Targets {
			names, labels := promQLNames(q.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: no metric found in %q", p.Title, q.Expr)
			}
			have := map[string]bool{"le": false}
			for _, n := range names {
				base, suffix := n, ""
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, s); ok {
						if _, known := exported[b]; known {
							base, suffix = b, s
						}
					}
				}
				m, ok := exported[base]
				switch {
				case !ok:
					t.Errorf("panel %q: %s in %q is not a metric the controller registers", p.Title, n, q.Expr)
					continue
				case m.histogram && suffix == "":
					t.Errorf("panel %q: histogram %s used without _bucket, _sum or _count in %q", p.Title, n, q.Expr)
				case !m.histogram && suffix != "":
					t.Errorf("panel %q: %s is not a histogram's series (%q)", p.Title, n, q.Expr)
				}
				for _, l := range m.labels {
					have[l] = true
				}
				if suffix == "_bucket" {
					have["le"] = true
				}
			}
			for _, l := range labels {
				if !have[l] {
					t.Errorf("panel %q: %q groups by %s, a label none of its metrics has", p.Title, q.Expr, l)
				}
			}
		}
	}
}

// The expression reader finds what a panel selects, and only that.
func TestPromQLNames(t *testing.T) {
	for expr, want := range map[string][2][]string{
		`sum by (trigger, result) (rate(kdefer_runs_total{result!="x"}[$__rate_interval]))`: {{"kdefer_runs_total"}, {"trigger", "result"}},
		`histogram_quantile(0.9, sum by (le) (rate(a_bucket[5m]))) / on(le) b offset 1h`:    {{"a_bucket", "b"}, {"le", "le"}},
		`max(kdefer_retained_volumes) > 24 * 3600 and bool c`:                               {{"kdefer_retained_volumes", "c"}, nil},
	} {
		names, labels := promQLNames(expr)
		if !slices.Equal(names, want[0]) || !slices.Equal(labels, want[1]) {
			t.Errorf("promQLNames(%q) = %q, %q; want %q, %q", expr, names, labels, want[0], want[1])
		}
	}
}
