package stagein

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strconv"

	"github.com/kdefer/kdefer/storage"
)

// ranged downloads a large object in parallel ranges written with WriteAt
// straight into f, and checks the combined CRC32C.
func (d *downloader) ranged(ctx context.Context, pool *storage.Pool, f *os.File, en *entry) error {
	if !en.hasCRC {
		err := d.o.Retry.Do(ctx, func(ctx context.Context) error {
			oi, err := d.be.Stat(ctx, en.key)
			if err == nil {
				en.crc, en.hasCRC = oi.CRC32C, oi.HasCRC32C
				if oi.Size != en.size {
					return &storage.Error{Class: storage.Transient, Err: fmt.Errorf("object changed size during the run")}
				}
			}
			return err
		})
		if err != nil {
			return storage.WithOp("stat "+strconv.Quote(en.key), err)
		}
	}
	if err := f.Truncate(en.size); err != nil {
		return storage.WithOp("allocate "+strconv.Quote(en.rel), err)
	}
	n := int((en.size + rangeSize - 1) / rangeSize)
	crcs := make([]uint32, n)
	errs := make([]error, n)
	fns := make([]func(context.Context), n)
	for i := range n {
		off := int64(i) * rangeSize
		size := min(int64(rangeSize), en.size-off)
		fns[i] = func(ctx context.Context) {
			moved := d.prog.Attempt()
			errs[i] = d.o.Retry.Do(ctx, func(ctx context.Context) error {
				moved.Restart()
				r, _, err := d.be.NewReader(ctx, en.key, off, size)
				if err != nil {
					return err
				}
				defer r.Close()
				crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
				w := io.MultiWriter(io.NewOffsetWriter(f, off), crc, moved)
				m, err := storage.CopyBuffer(w, r)
				if err != nil {
					return err
				}
				if m != size {
					return &storage.Error{Class: storage.Transient, Err: fmt.Errorf("range at %d: got %d bytes, want %d", off, m, size)}
				}
				crcs[i] = crc.Sum32()
				return nil
			})
		}
	}
	pool.Parallel(fns)
	if err := firstErr(errs); err != nil {
		return storage.WithOp("download "+strconv.Quote(en.key), err)
	}
	if err := ctx.Err(); err != nil {
		return storage.WithOp("download "+strconv.Quote(en.key), err)
	}
	crc := crcs[0]
	for i := 1; i < n; i++ {
		crc = storage.CombineCRC32C(crc, crcs[i], min(int64(rangeSize), en.size-int64(i)*rangeSize))
	}
	if en.hasCRC && crc != en.crc {
		// A mismatch over a whole large file: fetch it again as one stream
		// would cost as much as the retry; report it as transient.
		return storage.WithOp("download "+strconv.Quote(en.key), &storage.Error{Class: storage.Transient,
			Err: fmt.Errorf("%w: got crc32c:%08x, want crc32c:%08x", errChecksum, crc, en.crc)})
	}
	return nil
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
