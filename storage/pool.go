package storage

import (
	"context"
	"sync"
	"sync/atomic"
)

// Pool runs units of work on a fixed number of workers: whole files, and
// the parts of large files. A file's unit runs its parts itself and idle
// workers join it (Parallel), so a few large files still keep every worker
// busy, nothing ever blocks on a full queue, and the number of transfers in
// flight (hence connections and buffers) never exceeds the worker count.
type Pool struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	units  chan func(context.Context)
	parts  chan func(context.Context)
	done   chan struct{}
	wg     sync.WaitGroup // workers
	track  sync.WaitGroup // submitted units
	once   sync.Once
	err    error
	mu     sync.Mutex
}

// NewPool starts n workers.
func NewPool(ctx context.Context, n int) *Pool {
	ctx, cancel := context.WithCancelCause(ctx)
	p := &Pool{ctx: ctx, cancel: cancel, units: make(chan func(context.Context)), parts: make(chan func(context.Context)), done: make(chan struct{})}
	for range max(n, 1) {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

// Context is cancelled when a unit fails.
func (p *Pool) Context() context.Context { return p.ctx }

func (p *Pool) work() {
	defer p.wg.Done()
	units := p.units
	for {
		select { // parts first: they finish files already started
		case f := <-p.parts:
			f(p.ctx)
			continue
		default:
		}
		select {
		case f := <-p.parts:
			f(p.ctx)
		case f, ok := <-units:
			if !ok {
				units = nil
				continue
			}
			f(p.ctx)
		case <-p.done:
			return
		}
	}
}

// Fail records the first error and cancels the pool.
func (p *Pool) Fail(err error) {
	if err == nil {
		return
	}
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.cancel(err)
}

// Err returns the first recorded error.
func (p *Pool) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Submit queues a unit; it blocks until a worker takes it. It returns false
// once the pool has failed.
func (p *Pool) Submit(f func(context.Context)) bool {
	p.track.Add(1)
	g := func(ctx context.Context) { defer p.track.Done(); f(ctx) }
	select {
	case p.units <- g:
		return true
	case <-p.ctx.Done():
		p.track.Done()
		return false
	}
}

// Each submits fn(ctx, i) as a unit for every i in [0, n), stops
// submitting once one fails (the first error fails the pool), and waits as
// Wait does, returning the first error.
func (p *Pool) Each(n int, fn func(ctx context.Context, i int) error) error {
	for i := range n {
		if !p.Submit(func(ctx context.Context) { p.Fail(fn(ctx, i)) }) {
			break
		}
	}
	return p.Wait()
}

// Parallel runs fns on the caller's goroutine and on every worker that is
// idle or becomes idle before the last of them has started, and waits for
// all of them. The caller never waits for a worker (all workers may be
// callers), and a worker that frees up while the caller runs a part joins
// at once: a large file that starts while the pool is busy still spreads
// over the workers the other files leave.
func (p *Pool) Parallel(fns []func(context.Context)) {
	var next atomic.Int64
	claimed := make(chan struct{}) // closed when the last part is taken
	run := func(ctx context.Context) {
		for {
			i := int(next.Add(1) - 1)
			if i >= len(fns) {
				return
			}
			if i == len(fns)-1 {
				close(claimed)
			}
			fns[i](ctx)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // offers helpers to workers until every part is taken
		defer wg.Done()
		for range len(fns) - 1 {
			wg.Add(1)
			select {
			case p.parts <- func(ctx context.Context) { defer wg.Done(); run(ctx) }:
			case <-claimed:
				wg.Done()
				return
			}
		}
	}()
	run(p.ctx)
	wg.Wait()
}

// Wait ends submission, waits for every unit and stops the workers.
func (p *Pool) Wait() error {
	p.once.Do(func() { close(p.units) })
	// Every Submit has returned, so every unit is running or finished; the
	// workers stay until the last unit (and the parts it offers) is done.
	p.track.Wait()
	close(p.done)
	p.wg.Wait()
	p.cancel(nil)
	return p.Err()
}
