package storage

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestPoolEach(t *testing.T) {
	var ran [100]atomic.Int32
	err := NewPool(context.Background(), 4).Each(len(ran), func(_ context.Context, i int) error {
		ran[i].Add(1)
		return nil
	})
	if err != nil {
		t.Fatalf("Each: %v", err)
	}
	for i := range ran {
		if n := ran[i].Load(); n != 1 {
			t.Errorf("unit %d ran %d times, want once", i, n)
		}
	}

	boom := errors.New("boom")
	// The deadline ends the test if a failure did not cancel the others.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = NewPool(ctx, 4).Each(100, func(ctx context.Context, i int) error {
		if i == 3 {
			return boom
		}
		<-ctx.Done() // the others wait for the failure to cancel them
		return ctx.Err()
	})
	if !errors.Is(err, boom) {
		t.Errorf("Each = %v, want the first failure %v", err, boom)
	}
}
