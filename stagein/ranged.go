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
	// Without a manifest, the store's checksum and size (a ranged read
	// brings neither): a size that differs already is permanent.
	oi := storage.ObjectInfo{Size: en.size}
	if !en.hasCRC {
		var err error
		oi, err = storage.RetryValue(ctx, d.o.Retry, func(ctx context.Context) (storage.ObjectInfo, error) {
			return d.be.Stat(ctx, en.key)
		})
		if err == nil {
			err = verify(en, storage.ObjectInfo{Size: oi.Size}, en.size, 0, nil)
		}
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
				r = storage.ContextReader(ctx, r)
				defer r.Close()
				crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
				w := io.MultiWriter(io.NewOffsetWriter(f, off), crc, moved)
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
	// A manifest mismatch over a whole large file is transient (fetching
	// it again as one stream would cost as much as the retry).
	var md5sum []byte
	if needMD5(en, oi) {
		var err error
		if md5sum, err = fileMD5(f); err != nil {
			return storage.WithOp("read back "+strconv.Quote(en.rel), err)
		}
	}
	return storage.WithOp("download "+strconv.Quote(en.key), verify(en, oi, en.size, crc, md5sum))
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
