package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// TestRetryRun: `kdefer retry` refuses what the controller would refuse,
// with the reason, and otherwise sets the request (kdefer.io/retry, the
// time) and waits for the controller to take it.
func TestRetryRun(t *testing.T) {
	now := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)
	released := func() *v1.DeferRun {
		r := runIn("a", v1.DeferRunFailed)
		r.Status.Conditions = append(r.Status.Conditions, metav1.Condition{Type: v1.DeferRunVolumeReleased, Status: metav1.ConditionTrue, Reason: v1.ReasonReleased, LastTransitionTime: metav1.Now()})
		return r
	}
	cases := map[string]struct {
		run      *v1.DeferRun
		timeout  time.Duration
		wantCode int
		wantReq  bool
	}{
		"failed, no wait":         {runIn("a", v1.DeferRunFailed), 0, 0, true},
		"failed, no controller":   {runIn("a", v1.DeferRunFailed), 30 * time.Millisecond, 3, true},
		"succeeded":               {runIn("a", v1.DeferRunSucceeded), 0, 1, false},
		"still running":           {runIn("a", v1.DeferRunStagingOut), 0, 1, false},
		"failed, volume released": {released(), 0, 1, false},
		"no such run":             {nil, 0, 1, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var objs []client.Object
			if tc.run != nil {
				objs = append(objs, tc.run)
			}
			c := fakeClient(objs...)
			var out bytes.Buffer
			err := retryRun(context.Background(), &out, c, "ns", "a", now, tc.timeout, 10*time.Millisecond)
			code := exitCodeOf(t, err)
			if code != tc.wantCode {
				t.Errorf("exit code %d (%v), want %d", code, err, tc.wantCode)
			}
			if tc.run == nil {
				return
			}
			got := &v1.DeferRun{}
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "a"}, got); err != nil {
				t.Fatal(err)
			}
			if req, ok := got.Annotations[v1.AnnotationRetry]; ok != tc.wantReq || (ok && req != "2026-12-01T16:00:00Z") {
				t.Errorf("retry annotation %q (set %v), want set %v to the time", req, ok, tc.wantReq)
			}
		})
	}
}
