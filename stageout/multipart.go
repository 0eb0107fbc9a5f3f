package stageout

import (
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/kdefer/kdefer/storage"
)

// multipart uploads a large file in parallel parts, each part's CRC32C
// computed as it is sent and combined into the object's (in order when the
// optional checksums need it: sums).
func (e *engine) multipart(ctx context.Context, pool *storage.Pool, src *source, f *file, partSize int64) error {
	up, err := storage.RetryValue(ctx, e.o.Retry, func(ctx context.Context) (storage.Upload, error) {
		return e.mp.Begin(ctx, f.key, storage.PutOptions{ContentType: storage.ContentTypeOf(f.rel)})
	})
	if err != nil {
		return storage.WithOp("upload "+strconv.Quote(f.rel), err)
	}
	n := int((f.size + partSize - 1) / partSize)
	parts := make([]storage.Part, n)
	errs := make([]error, n)
	fns := make([]func(context.Context), n)
	for i := range n {
		off := int64(i) * partSize
		size := min(partSize, f.size-off)
		fns[i] = func(ctx context.Context) {
			moved := e.prog.Attempt()
			errs[i] = e.retry(ctx, src, func(ctx context.Context) error {
				moved.Restart()
				r := &countReader{r: io.NewSectionReader(src, off, size), on: moved.Add}
				var err error
				parts[i], err = up.PutPart(ctx, i+1, r, size)
				return err
			})
		}
	}
	if e.o.Checksums&^storage.Combinable != 0 {
		// MD5 and SHA-256 hash the file in order as the parts are sent
		// (sums): one part after the other.
		for i, fn := range fns {
			if fn(ctx); errs[i] != nil {
				break
			}
		}
	} else {
		pool.Parallel(fns)
	}
	if err := errors.Join(errs...); err != nil || ctx.Err() != nil {
		if err == nil {
			err = ctx.Err()
		}
		// Best effort: an upload left behind is cleaned by the bucket's
		// lifecycle rule for incomplete uploads.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = up.Abort(actx)
		cancel()
		return storage.WithOp("upload "+strconv.Quote(f.rel), firstErr(errs, err))
	}
	crc := parts[0].CRC
	for _, p := range parts[1:] {
		crc = storage.CombineCRC32C(crc, p.CRC, p.Size)
	}
	err = e.o.Retry.Do(ctx, func(ctx context.Context) error { return up.Complete(ctx, parts, crc) })
	if err != nil {
		return storage.WithOp("upload "+strconv.Quote(f.rel), err)
	}
	f.crc = crc
	return nil
}

func firstErr(errs []error, def error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return def
}

type countReader struct {
	r  io.Reader
	on func(int64)
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.on(int64(n))
	}
	return n, err
}
