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

// The controller's answer, as retryRun reads it: a granted request raises
// status.retries.count, even when the resumed run has already failed again
// by the time the command looks (its Failed condition True once more); a
// refused one records the request and leaves the count.
func TestRetryRunAnswered(t *testing.T) {
	now := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)
	req := now.Format(time.RFC3339Nano)
	for name, tc := range map[string]struct {
		answer   func(st *v1.DeferRunStatus)
		wantCode int
	}{
		"granted, failed again at once": {func(st *v1.DeferRunStatus) {
			st.Retries = &v1.DeferRunRetries{Count: 1, HandledRequest: req}
		}, 0},
		"refused": {func(st *v1.DeferRunStatus) {
			st.Retries = &v1.DeferRunRetries{HandledRequest: req}
		}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			c := fakeClient(runIn("a", v1.DeferRunFailed))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { // the controller
				for ctx.Err() == nil {
					r := &v1.DeferRun{}
					if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a"}, r); err == nil && r.Annotations[v1.AnnotationRetry] == req {
						tc.answer(&r.Status)
						_ = c.Update(ctx, r) // no status subresource in the fake
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
			var out bytes.Buffer
			err := retryRun(ctx, &out, c, "ns", "a", now, 5*time.Second, 5*time.Millisecond)
			if code := exitCodeOf(t, err); code != tc.wantCode {
				t.Errorf("exit code %d (%v; %s), want %d", code, err, out.String(), tc.wantCode)
			}
		})
	}
}
