package storage

import (
	"context"
	"math/rand/v2"
	"time"

	"k8s.io/utils/clock"
)

// RetryPolicy retries transient errors with full-jitter exponential backoff
// (sleep uniformly in [0, min(Max, Base*2^attempt))): jitter keeps many
// workers, and many pods, from retrying in lockstep against a struggling
// server.
type RetryPolicy struct {
	// Attempts is the total number of tries (>= 1).
	Attempts int
	Base     time.Duration
	Max      time.Duration
	// Clock and Rand are injectable so tests need no real sleeps.
	Clock clock.Clock
	// Rand returns a float in [0,1).
	Rand func() float64
	// OnRetry, when set, is told about every retried failure.
	OnRetry func(attempt int, wait time.Duration, err error)
}

// DefaultRetry rides out ~1 minute of server trouble (a MinIO restart, a
// rolling update, throttling) before giving up with a transient exit.
func DefaultRetry() RetryPolicy {
	return RetryPolicy{Attempts: 10, Base: 250 * time.Millisecond, Max: 15 * time.Second}
}

func (p RetryPolicy) backoff(attempt int) time.Duration {
	d := p.Base << uint(attempt)
	if d > p.Max || d <= 0 {
		d = p.Max
	}
	r := p.Rand
	if r == nil {
		r = rand.Float64
	}
	return time.Duration(r() * float64(d))
}

// Do runs fn until it succeeds, fails with a non-transient error, the
// attempts are used up or ctx ends. It returns fn's last error.
func (p RetryPolicy) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	clk := p.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	attempts := max(p.Attempts, 1)
	var err error
	for i := range attempts {
		if err = fn(ctx); err == nil {
			return nil
		}
		if ClassOf(err) != Transient || ctx.Err() != nil || i == attempts-1 {
			return err
		}
		wait := p.backoff(i)
		if p.OnRetry != nil {
			p.OnRetry(i+1, wait, err)
		}
		t := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C():
		}
	}
	return err
}

// RetryValue is p.Do for an fn that returns a value (a Stat, the start of
// an upload): it returns the value of the last attempt with its error.
func RetryValue[T any](ctx context.Context, p RetryPolicy, fn func(ctx context.Context) (T, error)) (T, error) {
	var v T
	err := p.Do(ctx, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx)
		return err
	})
	return v, err
}
