//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
	"github.com/kdefer/kdefer/test/repo"
)

// TestMetricsEvaluated: what the live kdefer-controller exports answers
// every query of the shipped Grafana dashboard and every alert of the
// shipped PrometheusRule (deploy/monitoring/), evaluated as Prometheus
// would (test/promql, Prometheus's own engine) over two scrapes of its
// /metrics taken as a Prometheus with the kdefer-metrics-reader role
// would (HTTPS, a ServiceAccount's bearer token). Each expression returns
// at least one series, and each series carries the labels the expression
// groups by (by (...), read from the parsed expression): a metric or label
// renamed in the controller, or misspelt in a panel or an alert, fails here
// rather than showing an empty panel or an alert that never fires.
// (controller's TestDashboardMetricsExist holds the names to the
// registered collectors; this holds the expressions to the series.)
//
// The runs behind the series, made here so that the scenario needs no other
// (two Jobs side by side): one whose defer pod (a hold step) is evicted
// once, then created again and succeeds (a refusal, result Succeeded), and
// one whose stage-out cannot succeed (its bucket does not exist): it fails,
// its volume kept (the retained-volume gauges count it), and a retry
// request (`kdefer retry`'s) resumes it (cause RetryRequested) to fail the
// same way again. The eviction is the kubelet's as kdefer sees it (phase
// Failed, condition DisruptionTarget), written to the pod's status by the
// test: kdefer's defer pods request nothing, so that a node admits them
// whatever runs there, and a real refusal takes node pressure or a taint on
// a node of its own (TestDiskPressure, TestTaintEviction). An alert's
// condition is false in a healthy cluster, and so is each here but
// KdeferRunsFailing's: each alert's compared vector is evaluated instead of
// its threshold comparison (test/promql strips "> 30"; logged).
func TestMetricsEvaluated(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "metrics")
	s.create(s.holdPolicy("hold"))
	w := small
	w.mode = "exit 0"
	held, failing := s.job("held", w), s.job("failing", w)
	held.Annotations[v1.AnnotationPolicy] = "hold"
	failing.Annotations[v1.AnnotationStageOut] = "s3://no-such-bucket-e2e/{namespace}/{pod}/" + s.s3Query()
	s.create(held)
	s.create(failing)
	// Both pods exit as soon as they have written their outputs.
	heldPod := s.waitJobPodStarted("held", 2*time.Minute)
	failingPod := s.waitJobPodStarted("failing", 2*time.Minute)
	for ready := ""; ready != "defer-"+heldPod; {
		ready = s.waitReady(2 * time.Minute) // the Jobs' pods first
	}
	s.evictDeferPod(heldPod, "TerminationByKubelet")
	s.waitRun(heldPod, time.Minute, "to count the refusal", func(r *v1.DeferRun) bool { return r.Status.Refusals != nil })
	s.sig.release("defer-" + heldPod) // the hold step of the defer pod created again
	s.waitFinished(heldPod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 2*time.Minute)
	run := s.waitFinished(failingPod, v1.TriggerSucceeded, v1.DeferRunFailed, 3*time.Minute)
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
	if c == nil {
		t.Fatal("the failed run has no Failed condition")
	}
	produced := producedHere(c.Reason)
	// The request `kdefer retry` makes. (Not the CLI itself: it waits
	// for the resume and reports "refused" when the resumed run has
	// failed again before its next look, as this one does within a
	// second.)
	retryReq := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1.AnnotationRetry, time.Now().UTC().Format(time.RFC3339Nano))
	if err := s.env.Client.Patch(s.ctx, run, client.RawPatch(types.MergePatchType, []byte(retryReq))); err != nil {
		t.Fatal(err)
	}
	run = s.waitRun(failingPod, 3*time.Minute, "to fail again after the retry", func(r *v1.DeferRun) bool {
		return r.Status.State == v1.DeferRunFailed && r.Status.Retries != nil && r.Status.Retries.Count == 1
	})

	// Two scrapes, as a Prometheus scraping every few seconds would have:
	// rate() and increase() need two samples of a series in their window.
	scrape := s.metricsScraper()
	var scrapes []promScrape
	for i := range 2 {
		if i > 0 {
			time.Sleep(5 * time.Second)
		}
		scrapes = append(scrapes, promScrape{Time: time.Now().UnixMilli(), Text: scrape()})
	}
	s.logf("scraped /metrics twice: %d and %d bytes", len(scrapes[0].Text), len(scrapes[1].Text))

	queries := append(dashboardQueries(t), alertQueries(t)...)
	resp := evalPromQL(t, promRequest{Scrapes: scrapes, Queries: queries})
	s.logf("evaluated %d expressions over %d samples of %d metric families", len(resp.Results), resp.Samples, resp.Families)
	if len(resp.Results) != len(queries) {
		t.Fatalf("%d results for %d queries", len(resp.Results), len(queries))
	}
	total := 0
	for _, r := range resp.Results {
		total += len(r.Series)
		what := r.Name + ": " + r.Expr
		if r.Stripped {
			what += " (threshold stripped: " + r.Evaluated + ")"
		}
		if r.Error != "" {
			t.Errorf("%s: %s", what, r.Error)
			continue
		}
		if len(r.Series) == 0 {
			t.Errorf("%s: no series", what)
			continue
		}
		var seen []string
		for _, ser := range r.Series {
			for _, l := range r.By {
				if ser.Labels[l] == "" {
					t.Errorf("%s: series %v without label %s, which it groups by", what, ser.Labels, l)
				}
			}
			seen = append(seen, fmt.Sprintf("%v=%s", ser.Labels, ser.Value))
		}
		// The label values this scenario's own runs put there.
		for metric, want := range produced {
			if !strings.Contains(r.Evaluated, metric) {
				continue
			}
			for l, vs := range want {
				for _, v := range vs {
					if slices.Contains(r.By, l) && !slices.ContainsFunc(r.Series, func(ser promSeries) bool { return ser.Labels[l] == v }) {
						t.Errorf("%s: no series with %s=%q, which this scenario's runs made", what, l, v)
					}
				}
			}
		}
		s.logf("%s: by %v: %d series: %s", what, r.By, len(r.Series), strings.Join(seen, " "))
	}
	s.logf("%d expressions, %d series in all", len(resp.Results), total)

	patch := []byte(`{"metadata":{"annotations":{"` + v1.AnnotationRelease + `":"true"}}}`)
	if err := s.env.Client.Patch(s.ctx, run, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	s.cleanUp("held", "failing")
}

// evictDeferPod ends pod's running defer pod as a kubelet's eviction
// does, as kdefer sees it: phase Failed with condition DisruptionTarget
// (reason: the kubelet's, the Eviction API's, ...). The kubelet stops its
// containers once the API says the pod is terminal.
func (s *scenario) evictDeferPod(pod, reason string) {
	s.t.Helper()
	run := s.waitRun(pod, time.Minute, "to have a defer pod", inProgress)
	pods := s.env.Clientset.CoreV1().Pods(s.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := pods.Get(s.ctx, run.Status.DeferPodName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason,
			Message: "evicted by the e2e test", LastTransitionTime: metav1.Now(),
		})
		_, err = pods.UpdateStatus(s.ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		s.t.Fatalf("evicting defer pod %s: %v", run.Status.DeferPodName, err)
	}
	s.logf("defer pod %s: phase Failed, DisruptionTarget %s (an eviction)", run.Status.DeferPodName, reason)
}

// producedHere: for the expressions over a metric, the label values that
// TestMetricsEvaluated's runs put there, which the series it groups by must
// include (others' runs may add more); failure is the failed run's reason.
func producedHere(failure string) map[string]map[string][]string {
	return map[string]map[string][]string{
		"kdefer_runs_total":               {"trigger": {string(v1.TriggerSucceeded)}, "result": {v1.DeferRunSucceeded, v1.DeferRunFailed}},
		"kdefer_run_duration_seconds":     {"result": {v1.DeferRunSucceeded, v1.DeferRunFailed}},
		"kdefer_run_failures_total":       {"reason": {failure}},
		"kdefer_defer_pod_refusals_total": {"reason": {"TerminationByKubelet"}},
		"kdefer_run_resumes_total":        {"cause": {v1.ReasonRetryRequested}},
	}
}

// metricsScraper returns a function that GETs the live controller's
// /metrics as a scraper would: over HTTPS (the certificate is self-signed:
// not verified, as a scrape config with insecure_skip_verify), with the
// bearer token of a ServiceAccount bound to the chart's
// kdefer-metrics-reader ClusterRole. The address is the controller's
// --metrics-bind-address (the local values: 127.0.0.1:8443 on the host
// network, which the test shares with the nodes).
func (s *scenario) metricsScraper() func() string {
	t := s.t
	t.Helper()
	cs := s.env.Clientset
	pod := s.controllerPod()
	if pod == nil {
		t.Fatal("no kdefer-controller pod")
	}
	addr := ""
	for _, c := range pod.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--metrics-bind-address="); ok {
				addr = v
			}
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "0" {
		t.Fatalf("kdefer-controller's --metrics-bind-address %q: metrics off or unreadable (%v)", addr, err)
	}
	if host == "" || net.ParseIP(host).IsUnspecified() {
		host = pod.Status.PodIP
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper", Namespace: s.ns}}
	if _, err := cs.CoreV1().ServiceAccounts(s.ns).Create(s.ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kdefer-e2e-metrics-" + s.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kdefer-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: s.ns}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(s.ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	tr, err := cs.CoreV1().ServiceAccounts(s.ns).CreateToken(s.ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](900)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the metrics server's certificate is self-signed
	}}
	url := "https://" + net.JoinHostPort(host, port) + "/metrics"
	get := func(ctx context.Context) (string, int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", 0, err
		}
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		req.Header.Set("Accept", "text/plain;version=0.0.4") // the text exposition, not protobuf
		resp, err := hc.Do(req)
		if err != nil {
			return "", 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), resp.StatusCode, err
	}
	// The binding takes effect once the controller's authorizer sees it
	// (a denial may be cached for a while): retried until then.
	var body string
	err = clusterenv.WaitFor(s.ctx, time.Minute, "GET "+url+" allowed", func(ctx context.Context) (bool, error) {
		b, code, err := get(ctx)
		if err != nil || code != http.StatusOK {
			s.logf("GET %s: %d %v %.200s", url, code, err, b)
			return false, nil
		}
		body = b
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first := true
	return func() string {
		if first {
			first = false
			return body
		}
		b, code, err := get(s.ctx)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %v %.200s", url, code, err, b)
		}
		return b
	}
}

// The request and response of test/promql (its main.go has the fields' meanings).
type (
	promScrape struct {
		Time int64  `json:"time"`
		Text string `json:"text"`
	}
	promQuery struct {
		Name           string `json:"name"`
		Expr           string `json:"expr"`
		StripThreshold bool   `json:"stripThreshold,omitempty"`
	}
	promRequest struct {
		Scrapes []promScrape `json:"scrapes"`
		Queries []promQuery  `json:"queries"`
	}
	promSeries struct {
		Labels map[string]string `json:"labels"`
		Value  string            `json:"value"`
	}
	promResponse struct {
		Samples  int `json:"samples"`
		Families int `json:"families"`
		Results  []struct {
			Name      string       `json:"name"`
			Expr      string       `json:"expr"`
			Evaluated string       `json:"evaluated"`
			Stripped  bool         `json:"stripped"`
			By        []string     `json:"by"`
			Series    []promSeries `json:"series"`
			Error     string       `json:"error"`
		} `json:"results"`
	}
)

// evalPromQL runs test/promql on req.
func evalPromQL(t *testing.T, req promRequest) promResponse {
	t.Helper()
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(program(t, "./test/promql"))
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stderr = bytes.NewReader(in), &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("test/promql: %v\n%s", err, stderr.String())
	}
	var resp promResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("test/promql's answer: %v\n%.2000s", err, out)
	}
	return resp
}

// grafanaVars are the values the dashboard's Grafana variables take here:
// a range vector over both scrapes.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h")

// dashboardQueries are the shipped dashboard's expressions, named by panel.
func dashboardQueries(t *testing.T) []promQuery {
	t.Helper()
	var cm corev1.ConfigMap
	readYAML(t, "deploy/monitoring/grafana-dashboard.yaml", &cm)
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
	var qs []promQuery
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			expr := grafanaVars.Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q: a Grafana variable this test gives no value: %s", p.Title, tg.Expr)
			}
			qs = append(qs, promQuery{Name: fmt.Sprintf("panel %q #%d", p.Title, i+1), Expr: expr})
		}
	}
	if len(qs) == 0 {
		t.Fatal("no dashboard query")
	}
	return qs
}

// alertQueries are the shipped PrometheusRule's alert expressions, each to
// be evaluated without its threshold.
func alertQueries(t *testing.T) []promQuery {
	t.Helper()
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	readYAML(t, "deploy/monitoring/prometheusrule.yaml", &rule)
	var qs []promQuery
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				qs = append(qs, promQuery{Name: "alert " + r.Alert, Expr: r.Expr, StripThreshold: true})
			}
		}
	}
	if len(qs) == 0 {
		t.Fatal("no alert")
	}
	return qs
}

func readYAML(t *testing.T, rel string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo.MustRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}
