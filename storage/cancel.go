package storage

import (
	"context"
	"io"
	"sync"
)

// ContextReader returns r bound to ctx: every Read first checks ctx, and
// ctx's end closes r, which unblocks a Read hung in the store (a stalled
// connection, a driver that ignores its context). A copy through it stops
// within one buffer of a SIGTERM; its reads then fail with ctx's error.
// Closing the returned reader closes r once.
func ContextReader(ctx context.Context, r io.ReadCloser) io.ReadCloser {
	cr := &ctxReader{ctx: ctx, r: r}
	cr.stop = context.AfterFunc(ctx, func() { cr.close() })
	return cr
}

type ctxReader struct {
	ctx  context.Context
	r    io.ReadCloser
	stop func() bool
	once sync.Once
	err  error
}

func (cr *ctxReader) Read(p []byte) (int, error) {
	if err := cr.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := cr.r.Read(p)
	if err != nil && cr.ctx.Err() != nil {
		return n, cr.ctx.Err() // the close below, not the store
	}
	return n, err
}

func (cr *ctxReader) close() error {
	cr.once.Do(func() { cr.err = cr.r.Close() })
	return cr.err
}

func (cr *ctxReader) Close() error {
	cr.stop()
	return cr.close()
}
