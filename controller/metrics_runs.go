package controller

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// RunGauges are the state metrics of the runs, computed from the cache at
// every scrape (as kube-state-metrics does), so that they are right after a
// restart and cost nothing between scrapes.
type RunGauges struct {
	// InFlight: runs triggered and not finished (waiting for a node or a
	// backoff, or staging out).
	InFlight int
	// Retained: finished runs whose work volume is kept (failed or
	// Incomplete, onFailure Retain), and RetainedBytes their PVCs'
	// capacity (status.capacity, else the requested size, as the runs
	// record it in status.retainedBytes): the disk they hold on their
	// nodes, not what is written on it.
	Retained      int
	RetainedBytes int64
	// OldestRetained is how long the longest-kept volume has been kept
	// (since its run finished); 0 when none is.
	OldestRetained time.Duration
}

// ComputeRunGauges digests runs into RunGauges.
func ComputeRunGauges(runs []v1.DeferRun, now time.Time) RunGauges {
	var g RunGauges
	for i := range runs {
		run := &runs[i]
		switch {
		case !v1.Finished(run):
			if run.Status.Trigger != "" {
				g.InFlight++
			}
		case retained(run):
			g.Retained++
			g.RetainedBytes += run.Status.RetainedBytes
			if t := run.Status.CompletionTime; t != nil && now.Sub(t.Time) > g.OldestRetained {
				g.OldestRetained = now.Sub(t.Time)
			}
		}
	}
	return g
}

// retained says whether a finished run keeps its work volume.
func retained(run *v1.DeferRun) bool {
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunVolumeReleased)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1.ReasonRetained
}

// runCollector serves RunGauges from the manager's cache (set by
// SetupWithManager; nothing is collected before).
type runCollector struct {
	reader   atomic.Pointer[client.Reader]
	clock    clock.Clock
	inFlight *prometheus.Desc
	retained *prometheus.Desc
	bytes    *prometheus.Desc
	oldest   *prometheus.Desc
}

var runGauges = &runCollector{
	clock:    clock.RealClock{},
	inFlight: prometheus.NewDesc("kdefer_runs_in_flight", "Defer runs triggered and not finished (waiting for their node or a backoff, or staging out).", nil, nil),
	retained: prometheus.NewDesc("kdefer_retained_volumes", "Finished defer runs whose work volume is kept (failed or Incomplete, onFailure Retain) until released.", nil, nil),
	bytes:    prometheus.NewDesc("kdefer_retained_volume_bytes", "Capacity (else requested size) of the work PVCs of kdefer_retained_volumes: the disk they hold.", nil, nil),
	oldest:   prometheus.NewDesc("kdefer_retained_volume_oldest_seconds", "Time since the run of the longest-kept work volume finished; 0 when none is kept.", nil, nil),
}

func (c *runCollector) use(r client.Reader) { c.reader.Store(&r) }

func (c *runCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.retained
	ch <- c.bytes
	ch <- c.oldest
}

func (c *runCollector) Collect(ch chan<- prometheus.Metric) {
	rp := c.reader.Load()
	if rp == nil {
		return
	}
	r := *rp
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list v1.DeferRunList
	if err := r.List(ctx, &list); err != nil {
		if errors.As(err, new(*cache.ErrCacheNotStarted)) {
			// Scraped before the manager started its cache (the metrics
			// server starts first): nothing yet, as before SetupWithManager.
			// An invalid metric would fail the whole scrape (HTTP 500).
			return
		}
		ch <- prometheus.NewInvalidMetric(c.inFlight, err)
		return
	}
	g := ComputeRunGauges(list.Items, c.clock.Now())
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(g.InFlight))
	ch <- prometheus.MustNewConstMetric(c.retained, prometheus.GaugeValue, float64(g.Retained))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(g.RetainedBytes))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, g.OldestRetained.Seconds())
}

// refusalLabel bounds the reason label of kdefer_defer_pod_refusals_total:
// the reasons Refusal recognises are Kubernetes' own, but OutOf<resource>
// names any extended resource; a long or odd one is "Other".
func refusalLabel(reason string) string {
	if len(reason) > 48 || strings.ContainsFunc(reason, oddInLabel) {
		return "Other"
	}
	return reason
}

// oddInLabel: a character no Kubernetes reason (nor a resource name) holds.
func oddInLabel(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("-._/", r)
}
