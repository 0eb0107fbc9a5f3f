package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// TestComputeRunGauges: in flight are the triggered, unfinished runs (not
// the armed ones); kept volumes are the finished runs whose
// VolumeReleased condition says Retained, with the sizes they recorded and the
// age of the oldest.
func TestComputeRunGauges(t *testing.T) {
	mk := func(trigger v1.Trigger, conds ...metav1.Condition) v1.DeferRun {
		r := kt.MakeRun("p", "ns").Obj()
		r.Status.Trigger = trigger
		r.Status.Conditions = conds
		if v1.Finished(r) {
			r.Status.CompletionTime = &metav1.Time{Time: conds[0].LastTransitionTime.Time}
		}
		return *r
	}
	cond := func(typ string, s metav1.ConditionStatus, reason string, at time.Time) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason, LastTransitionTime: metav1.NewTime(at)}
	}
	runs := []v1.DeferRun{
		mk(""), // armed
		mk(v1.TriggerFailed, cond(v1.DeferRunStagingOut, metav1.ConditionTrue, v1.ReasonStagingOut, t0)),
		mk(v1.TriggerEvicted, cond(v1.DeferRunStagingOut, metav1.ConditionFalse, v1.ReasonNodeNotReady, t0)),
		mk(v1.TriggerFailed, cond(v1.DeferRunFailed, metav1.ConditionTrue, v1.ReasonDeadlineExceeded, t0.Add(-3*time.Hour)),
			cond(v1.DeferRunVolumeReleased, metav1.ConditionFalse, v1.ReasonRetained, t0.Add(-3*time.Hour))),
		mk(v1.TriggerFailed, cond(v1.DeferRunFailed, metav1.ConditionTrue, v1.ReasonNodeLost, t0.Add(-time.Hour)),
			cond(v1.DeferRunVolumeReleased, metav1.ConditionFalse, v1.ReasonRetained, t0.Add(-time.Hour))),
		mk(v1.TriggerFailed, cond(v1.DeferRunFailed, metav1.ConditionTrue, v1.ReasonNodeLost, t0.Add(-9*time.Hour)),
			cond(v1.DeferRunVolumeReleased, metav1.ConditionTrue, v1.ReasonReleased, t0)),
		mk(v1.TriggerSucceeded, cond(v1.DeferRunSucceeded, metav1.ConditionTrue, v1.ReasonSucceeded, t0.Add(-9*time.Hour)),
			cond(v1.DeferRunVolumeReleased, metav1.ConditionTrue, v1.ReasonReleased, t0)),
	}
	for i := 3; i <= 5; i++ { // the two kept, and a released one whose count must not be added
		runs[i].Status.RetainedBytes = 1 << 30
	}
	g := ComputeRunGauges(runs, t0)
	want := RunGauges{InFlight: 2, Retained: 2, RetainedBytes: 2 << 30, OldestRetained: 3 * time.Hour}
	if g != want {
		t.Errorf("ComputeRunGauges = %+v, want %+v", g, want)
	}
}

func TestRefusalLabel(t *testing.T) {
	for in, want := range map[string]string{
		"OutOfcpu": "OutOfcpu", "Evicted": "Evicted", "OutOfexample.com/gpu": "OutOfexample.com/gpu",
		"PreemptionByScheduler": "PreemptionByScheduler", "a reason with spaces": "Other", strings.Repeat("x", 49): "Other",
	} {
		if got := refusalLabel(in); got != want {
			t.Errorf("refusalLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAlertRulesUseRealMetrics: every kdefer_ metric the shipped alerts
// query is one the controller exports, so a rename cannot silently turn an
// alert off.
func TestAlertRulesUseRealMetrics(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deploy", "monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	exported := exportedMetrics(t)
	used := regexp.MustCompile(`kdefer_[a-z_]+`).FindAllString(string(data), -1)
	if len(used) == 0 {
		t.Fatal("no kdefer_ metric in the rules")
	}
	for _, u := range used {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(u, "_bucket"), "_count"), "_sum")
		if _, ok := exported[base]; !ok {
			t.Errorf("the alert rules query %s, which the controller does not export", u)
		}
	}
}

// TestRunGaugesBeforeTheCacheStarts: a scrape before the manager started its
// cache (the metrics server starts first) gets no run gauges and no error:
// an error would fail the whole scrape. Other errors still say so.
func TestRunGaugesBeforeTheCacheStarts(t *testing.T) {
	rc := &runCollector{clock: runGauges.clock, inFlight: runGauges.inFlight, retained: runGauges.retained, bytes: runGauges.bytes, oldest: runGauges.oldest}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(rc)
	// What an informer cache answers before it is started (envtest saw it
	// when a test scraped right after its manager's set-up).
	rc.use(errReader{&cache.ErrCacheNotStarted{}})
	fams, err := reg.Gather()
	if err != nil || len(fams) != 0 {
		t.Errorf("gather before the cache started: %d families, %v; want none and no error", len(fams), err)
	}
	rc.use(errReader{errors.New("apiserver down")})
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "apiserver down") {
		t.Errorf("gather with a failing cache: %v, want its error", err)
	}
}

// errReader fails every read with its error.
type errReader struct{ err error }

func (r errReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return r.err
}

func (r errReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return r.err
}
