// Command promql evaluates PromQL expressions against scraped Prometheus
// text expositions, as a Prometheus that scraped them would: the e2e tier's
// TestMetricsEvaluated feeds it what it scraped from the live
// kdefer-controller and the expressions of the shipped dashboard and alerts,
// and judges the JSON it prints.
//
// A module of its own: Prometheus's engine and TSDB pull in a dependency
// graph kdefer's go.mod has no use for. test/e2e/run.sh builds it next to
// the other programs the scenarios run (-C test/promql).
//
//	promql < request.json > response.json
//
// The request names the scrapes (the exposition's text and the time it was
// taken), the instant to evaluate at, and the expressions; for each
// expression the response has the series it returned, the labels its
// aggregations group by (by (...), less the le that histogram_quantile
// consumes), and, where the request asks to strip the threshold of an alert
// (expr > 5), the expression evaluated instead (the compared vector).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/tsdb"
)

// Request is what promql reads on its standard input.
type Request struct {
	Scrapes []Scrape `json:"scrapes"`
	// At is the evaluation instant in Unix milliseconds (the last scrape's
	// when zero).
	At      int64   `json:"at,omitempty"`
	Queries []Query `json:"queries"`
}

// Scrape is one scrape: the text exposition and its time (Unix ms).
type Scrape struct {
	Time int64  `json:"time"`
	Text string `json:"text"`
}

// Query is one expression to evaluate.
type Query struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
	// StripThreshold evaluates, for an expression whose top is a filtering
	// comparison of a vector with a scalar (an alert's threshold), the
	// vector alone: in a healthy cluster the alert's condition is false
	// and the whole expression returns nothing by design.
	StripThreshold bool `json:"stripThreshold,omitempty"`
}

// Response is what promql writes on its standard output.
type Response struct {
	Samples  int      `json:"samples"`  // samples loaded, over all scrapes
	Families int      `json:"families"` // metric families in the last scrape
	Results  []Result `json:"results"`
}

// Result is one expression's evaluation.
type Result struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
	// Evaluated is the expression evaluated: Expr, or its compared vector
	// when the threshold was stripped (Stripped).
	Evaluated string   `json:"evaluated"`
	Stripped  bool     `json:"stripped,omitempty"`
	By        []string `json:"by"`
	Series    []Series `json:"series"`
	Error     string   `json:"error,omitempty"`
}

// Series is one returned series: its labels and value (NaN as a string:
// JSON has no NaN).
type Series struct {
	Labels map[string]string `json:"labels"`
	Value  string            `json:"value"`
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "promql:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	var req Request
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	if len(req.Scrapes) == 0 {
		return errors.New("request: no scrape")
	}
	dir, err := os.MkdirTemp("", "promql-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := tsdb.Open(dir, nil, nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		return err
	}
	defer db.Close()
	var resp Response
	for i, s := range req.Scrapes {
		n, fams, err := load(db, s)
		if err != nil {
			return fmt.Errorf("scrape %d: %w", i, err)
		}
		resp.Samples += n
		resp.Families = fams
	}
	at := req.At
	if at == 0 {
		at = req.Scrapes[len(req.Scrapes)-1].Time
	}
	p := parser.NewParser(parser.Options{})
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, Parser: p})
	for _, q := range req.Queries {
		resp.Results = append(resp.Results, evaluate(engine, p, db, q, time.UnixMilli(at)))
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(resp)
}

// load parses a text exposition (expfmt, as client_golang's server writes
// it) and appends its samples at the scrape's time, histograms as the
// _bucket, _sum and _count series a Prometheus scrape makes of them.
func load(db *tsdb.DB, s Scrape) (samples, families int, err error) {
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(strings.NewReader(s.Text))
	if err != nil {
		return 0, 0, err
	}
	mfs := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		mfs = append(mfs, f)
	}
	vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.TimeFromUnixNano(s.Time * 1e6)}, mfs...)
	if err != nil {
		return 0, 0, err
	}
	app := db.Appender(context.Background())
	for _, smp := range vec {
		b := labels.NewScratchBuilder(len(smp.Metric))
		for k, v := range smp.Metric {
			b.Add(string(k), string(v))
		}
		b.Sort()
		if _, err := app.Append(0, b.Labels(), s.Time, float64(smp.Value)); err != nil {
			_ = app.Rollback()
			return 0, 0, fmt.Errorf("%s: %w", smp.Metric, err)
		}
	}
	return len(vec), len(fams), app.Commit()
}

// evaluate runs q at instant at.
func evaluate(engine *promql.Engine, p parser.Parser, db *tsdb.DB, q Query, at time.Time) Result {
	r := Result{Name: q.Name, Expr: q.Expr, Evaluated: q.Expr, By: []string{}, Series: []Series{}}
	expr, err := p.ParseExpr(q.Expr)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.By = groupingLabels(expr)
	if q.StripThreshold {
		if v := comparedVector(expr); v != nil {
			r.Evaluated, r.Stripped = v.String(), true
		}
	}
	ctx := context.Background()
	qry, err := engine.NewInstantQuery(ctx, db, nil, r.Evaluated, at)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		r.Error = res.Err.Error()
		return r
	}
	switch v := res.Value.(type) {
	case promql.Vector:
		for _, s := range v {
			r.Series = append(r.Series, Series{Labels: s.Metric.Map(), Value: value(s.F)})
		}
	case promql.Scalar:
		r.Series = append(r.Series, Series{Labels: map[string]string{}, Value: value(v.V)})
	default:
		r.Error = fmt.Sprintf("a %s, not an instant vector", res.Value.Type())
	}
	return r
}

func value(f float64) string {
	if math.IsNaN(f) {
		return "NaN"
	}
	return fmt.Sprint(f)
}

// groupingLabels are the labels expr's aggregations keep (by (...)), less
// le inside histogram_quantile, which consumes it: the labels each returned
// series must carry.
func groupingLabels(expr parser.Expr) []string {
	out := []string{}
	parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
		a, ok := n.(*parser.AggregateExpr)
		if !ok || a.Without {
			return nil
		}
		inQuantile := slices.ContainsFunc(path, func(n parser.Node) bool {
			c, ok := n.(*parser.Call)
			return ok && c.Func.Name == "histogram_quantile"
		})
		for _, l := range a.Grouping {
			if (l != model.BucketLabel || !inQuantile) && !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// comparedVector is, for expr "VECTOR > SCALAR" (or any filtering
// comparison, either way round), the vector; nil otherwise.
func comparedVector(expr parser.Expr) parser.Expr {
	for {
		p, ok := expr.(*parser.ParenExpr)
		if !ok {
			break
		}
		expr = p.Expr
	}
	b, ok := expr.(*parser.BinaryExpr)
	if !ok || !b.Op.IsComparisonOperator() || b.ReturnBool {
		return nil
	}
	switch {
	case b.LHS.Type() == parser.ValueTypeVector && b.RHS.Type() == parser.ValueTypeScalar:
		return b.LHS
	case b.RHS.Type() == parser.ValueTypeVector && b.LHS.Type() == parser.ValueTypeScalar:
		return b.RHS
	}
	return nil
}
