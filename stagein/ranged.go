package stagein

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/kdefer/kdefer/storage"
)

// ranged downloads a large object in parallel ranges written with WriteAt
// straight into f, and checks the combined CRC32C.
func (d *downloader) ranged(ctx context.Context, pool *storage.Pool, f *os.File, en *entry) error {
	// Without a manifest, the store's checksum and size (a ranged read
	// brings neither): a size that differs already is permanent.
	oi := storage.ObjectInfo{Size: en.size}
	if !en.hasCRC {
		var err error
		oi, err = storage.RetryValue(ctx, d.o.Retry, func(ctx context.Context) (storage.ObjectInfo, error) {
			return d.be.Stat(ctx, en.key)
		})
		if err == nil {
			err = verify(en, storage.ObjectInfo{Size: oi.Size}, en.size, storage.Sums{})
		}
		if err != nil {
			return storage.WithOp("stat "+strconv.Quote(en.key), err)
		}
	}
	if err := f.Truncate(en.size); err != nil {
		return storage.WithOp("allocate "+strconv.Quote(en.rel), err)
	}
	n := int((en.size + rangeSize - 1) / rangeSize)
	// Each range computes what combines (CRC32C, Adler-32); MD5 and
	// SHA-256 need the bytes in order, so the file is read back once.
	set := hashes(en, oi)
	sums := make([]storage.Sums, n)
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
				r = storage.ContextReader(ctx, r)
				defer r.Close()
				h := storage.NewHasher(set & storage.Combinable)
				w := io.MultiWriter(storage.FileWriter(io.NewOffsetWriter(f, off)), h, moved)
				m, err := storage.CopyBuffer(w, r)
				if err != nil {
					return err
				}
				if m != size && !en.hasCRC {
					// A clean end before the size the store listed: the
					// object is shorter than it says (see verify).
					return &storage.Error{Class: storage.Permanent, Fix: corruptFix, Err: fmt.Errorf("size mismatch: read %d bytes, the store lists %d", off+m, en.size)}
				}
				if m != size {
					return &storage.Error{Class: storage.Transient, Err: fmt.Errorf("range at %d: got %d bytes, want %d", off, m, size)}
				}
				sums[i] = h.Sums()
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
	got := sums[0]
	for i := 1; i < n; i++ {
		got = got.Combine(sums[i], min(int64(rangeSize), en.size-int64(i)*rangeSize))
	}
	// A manifest mismatch over a whole large file is transient (fetching
	// it again as one stream would cost as much as the retry).
	if serial := set &^ storage.Combinable; serial != 0 {
		back, err := fileSums(f, serial)
		if err != nil {
			return storage.WithOp("read back "+strconv.Quote(en.rel), err)
		}
		got.Set |= serial
		got.MD5, got.SHA256 = back.MD5, back.SHA256
	}
	if en.hasCRC && got.CRC32C != en.crc {
		// Ranges bring no full-object checksum: ask the store for its
		// own, which tells a replaced object from bytes damaged on the way.
		if st, err := storage.RetryValue(ctx, d.o.Retry, func(ctx context.Context) (storage.ObjectInfo, error) {
			return d.be.Stat(ctx, en.key)
		}); err == nil {
			oi = st
		}
	}
	return storage.WithOp("download "+strconv.Quote(en.key), verify(en, oi, en.size, got))
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
