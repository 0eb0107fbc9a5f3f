package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBookkeepingAt(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		age   time.Duration
		burst bool
		want  time.Time
	}{
		"young":                     {age: time.Second, want: t0.Add(bookkeepingDelay)},
		"young, in a burst":         {age: time.Second, burst: true, want: t0.Add(bookkeepingDelay)},
		"due":                       {age: bookkeepingDelay},
		"due, in a burst: waits on": {age: bookkeepingDelay, burst: true, want: t0.Add(bookkeepingDelay + burstRetry)},
		"a long burst: no later than maxBookkeepingDelay": {age: maxBookkeepingDelay, burst: true},
	} {
		t.Run(name, func(t *testing.T) {
			got := bookkeepingAt(t0, t0.Add(tc.age), tc.burst)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCreationRate(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var c creationRate
	// Steady: 20 a second is no burst.
	for i := 0; i < 60; i++ {
		c.add(t0.Add(time.Duration(i) * 50 * time.Millisecond))
	}
	if c.burst(t0.Add(3 * time.Second)) {
		t.Error("20 creations a second taken for a burst")
	}
	// 150 within a second is, in that second and the next.
	t1 := t0.Add(10 * time.Second)
	for i := 0; i < 150; i++ {
		c.add(t1.Add(time.Duration(i) * 5 * time.Millisecond))
	}
	if !c.burst(t1.Add(900 * time.Millisecond)) {
		t.Error("150 creations in a second not taken for a burst")
	}
	if !c.burst(t1.Add(1500 * time.Millisecond)) {
		t.Error("a burst forgotten in the next second")
	}
	if c.burst(t1.Add(2500 * time.Millisecond)) {
		t.Error("a burst remembered two seconds on")
	}
}
