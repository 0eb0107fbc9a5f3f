package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// kdefer-controller serves the metrics over HTTPS to requests whose bearer
// token the apiserver authenticates and authorizes (cmd/kdefer-controller/app
// MetricsOptions), which needs:
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Metrics are kdefer's own Prometheus metrics, registered in
// controller-runtime's registry next to its workqueue and client metrics.
var Metrics = struct {
	Runs       *prometheus.CounterVec
	Incomplete prometheus.Counter
	StageBytes prometheus.Counter
	Reaction   prometheus.Histogram
	Writes     *prometheus.CounterVec
	Resumes    *prometheus.CounterVec
	Refusals   *prometheus.CounterVec
	Failures   *prometheus.CounterVec
	Duration   *prometheus.HistogramVec
}{
	Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kdefer_runs_total", Help: "Finished defer runs by trigger and result (Succeeded, Failed, Skipped).",
	}, []string{"trigger", "result"}),
	Incomplete: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kdefer_runs_incomplete_total", Help: "Succeeded defer runs whose stage-out could not store every file (their volumes are kept).",
	}),
	StageBytes: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kdefer_stage_out_bytes_total", Help: "Bytes uploaded by stage-out steps, from their summaries.",
	}),
	Reaction: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kdefer_reaction_seconds",
		Help:    "Time from a managed pod seen ended to its defer pod created.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}),
	Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kdefer_api_writes_total", Help: "API writes the controller made, by kind.",
	}, []string{"kind"}),
	Resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kdefer_run_resumes_total", Help: "Failed defer runs resumed, by cause (RetryRequested, NodeReturned).",
	}, []string{"cause"}),
	Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kdefer_defer_pod_refusals_total", Help: "Defer pods their node refused to admit or evicted (each created again after a backoff), by the node's reason (OutOfcpu, Evicted, ...).",
	}, []string{"reason"}),
	Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kdefer_run_failures_total", Help: "Defer runs that failed, by the Failed condition's reason (DeadlineExceeded, NodeLost, RetriesExhausted, ...).",
	}, []string{"reason"}),
	Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kdefer_run_duration_seconds",
		Help:    "Time from a managed pod seen ended (or a failed run resumed) to its run finished, by result.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 21600},
	}, []string{"result"}),
}

func init() {
	metrics.Registry.MustRegister(collectors()...)
}

// collectors are kdefer's metrics as registered; the tests that hold the
// shipped alerts and dashboard to real metric names read the same list.
func collectors() []prometheus.Collector {
	return []prometheus.Collector{Metrics.Runs, Metrics.Incomplete, Metrics.StageBytes, Metrics.Reaction, Metrics.Writes,
		Metrics.Resumes, Metrics.Refusals, Metrics.Failures, Metrics.Duration, runGauges}
}
