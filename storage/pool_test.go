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

// TestParallelJoinedByWorkersFreedLater: a file's parts offered while
// every other worker is busy must not wait for the part its own unit runs:
// a worker that frees up meanwhile joins at once. Here the first part to
// run frees the other worker and then waits for a second part to start.
func TestParallelJoinedByWorkersFreedLater(t *testing.T) {
	p := NewPool(context.Background(), 2)
	release, busy := make(chan struct{}), make(chan struct{})
	p.Submit(func(context.Context) { close(busy); <-release })
	<-busy
	var started atomic.Int32
	second := make(chan struct{})
	joined := make(chan bool, 1)
	p.Submit(func(context.Context) {
		fns := make([]func(context.Context), 8)
		for i := range fns {
			fns[i] = func(context.Context) {
				switch started.Add(1) {
				case 1:
					close(release)
					select {
					case <-second:
						joined <- true
					case <-time.After(5 * time.Second):
						joined <- false
					}
				case 2:
					close(second)
				}
			}
		}
		p.Parallel(fns)
	})
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if !<-joined {
		t.Error("the other parts waited for the first one: the worker freed while it ran was not given them")
	}
	if n := started.Load(); n != 8 {
		t.Errorf("%d parts ran, want 8", n)
	}
}
