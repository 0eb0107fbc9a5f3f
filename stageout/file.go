package stageout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/kdefer/kdefer/storage"
)

// maxReads bounds how often a file that changes while it is read is read
// again: a log still being written would otherwise be uploaded forever.
const maxReads = 3

// file stores one file, or records why it cannot. Only store errors are
// returned (they fail the run, which is retried); whatever is wrong with the
// file itself costs that file alone.
func (e *engine) file(ctx context.Context, pool *storage.Pool, f *file, existing map[string]int64) error {
	for read := 1; ; read++ {
		again, err := e.read(ctx, pool, f, existing, read == maxReads)
		if err != nil || !again {
			return err
		}
		e.o.Log.Debug().Str("path", storage.ManifestPath(f.rel)).Int("read", read).Msg("read changed file again")
	}
}

// read opens f, stores what it holds and reports whether it changed while
// read and should be read again (never on the last read).
func (e *engine) read(ctx context.Context, pool *storage.Pool, f *file, existing map[string]int64, last bool) (bool, error) {
	fh, err := e.open(ctx, f.rel)
	if err != nil {
		if ctx.Err() != nil {
			return false, err // the run stops: no verdict on the file
		}
		e.unsaved(f.rel, reasonFor(err))
		return false, nil
	}
	defer fh.Close()
	before, err := fh.Stat()
	if err != nil {
		e.unsaved(f.rel, reasonFor(err))
		return false, nil
	}
	if !before.Mode().IsRegular() {
		e.unsaved(f.rel, ReasonNotRegular)
		return false, nil
	}
	if reason := sparseReason(fh, before); reason != "" {
		e.unsaved(f.rel, reason)
		return false, nil
	}
	// What the opened file holds now is what is stored and recorded, not
	// what the walk saw.
	e.prog.BytesTotal.Add(before.Size() - f.size)
	f.size, f.mtime = before.Size(), before.ModTime()
	src := &source{ctx: ctx, f: fh, size: f.size}
	size, exists := existing[f.key] // read-only once listed
	skipped, err := e.store(ctx, pool, src, f, exists && size == f.size)
	if lerr := src.failure(); lerr != nil {
		if errors.Is(lerr, errChanged) && !last {
			return true, nil
		}
		e.unsaved(f.rel, reasonFor(lerr))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	after, err := fh.Stat()
	if err == nil && after.Size() == before.Size() && after.ModTime().Equal(before.ModTime()) {
		e.stored(f, skipped)
		return false, nil
	}
	if !last {
		return true, nil
	}
	// Still changing: keep what was read (its checksum covers exactly the
	// bytes stored) and say that the file moved on.
	e.stored(f, skipped)
	e.unsaved(f.rel, fmt.Sprintf("%s (stored the first %d bytes)", ReasonChanged, f.size))
	return false, nil
}

// open opens a file the walk chose, for reading only what it is now. The
// os.Root resolves every path component itself (O_NOFOLLOW each step) and
// refuses a symlink leading out of the directory, so a link swapped in after
// the walk reads nothing outside. storage.OpenFile opens non-blocking, so a
// FIFO swapped in returns at once instead of waiting for a writer forever
// (SIGTERM included), and gives up on an open that hangs all the same; the
// caller then refuses everything fstat does not call a regular file.
func (e *engine) open(ctx context.Context, rel string) (*os.File, error) {
	return storage.OpenFile(ctx, e.root, rel, os.O_RDONLY, e.o.OpenTimeout)
}

// store uploads src under f.key, unless the object there has its content
// already; it reports whether it skipped.
func (e *engine) store(ctx context.Context, pool *storage.Pool, src *source, f *file, sameSize bool) (bool, error) {
	var partSize int64
	if e.mp != nil {
		partSize = e.mp.PartSize(f.size)
	}
	if !e.o.DryRun {
		// Whichever pass reads the file (the skip check or the upload)
		// computes the optional checksums.
		src.sums = newSums(e.o.Checksums, f.size, partSize)
	}
	if sameSize {
		skip, err := e.alreadyStored(ctx, src, f)
		if err != nil || skip {
			e.wouldSkip(f, skip)
			if err == nil {
				err = e.result(src, f)
			}
			return skip, err
		}
	}
	if e.o.DryRun {
		e.wouldUpload(f)
		return false, nil
	}
	if err := e.beforeWrite(ctx); err != nil {
		return false, err
	}
	if partSize > 0 {
		if err := e.multipart(ctx, pool, src, f, partSize); err != nil {
			return false, err
		}
		return false, e.result(src, f)
	}
	moved := e.prog.Attempt()
	attempt := 0
	err := e.retry(ctx, src, func(ctx context.Context) error {
		if attempt++; attempt > 1 {
			// The attempt before may have stored the object although its
			// answer was lost (the server went away just after writing
			// it): look before writing it again, so an upload resumed
			// after an outage writes nothing twice. A look that fails
			// tells nothing: this attempt ends with its error and the
			// next one looks again, instead of writing blind the moment
			// the server is back.
			oi, err := e.be.Stat(ctx, f.key)
			if stored, err := e.holds(src, f, oi, err); err != nil || stored {
				return err
			}
		}
		moved.Restart()
		crc, err := e.be.Put(ctx, f.key, src, f.size, storage.PutOptions{Progress: moved.Add, ContentType: storage.ContentTypeOf(f.rel)})
		f.crc = crc
		return err
	})
	if err != nil {
		return false, storage.WithOp("upload "+strconv.Quote(f.rel), err)
	}
	return false, e.result(src, f)
}

// result records the optional checksums the read computed. A read that
// fails here is src's failure (the file's), which the caller handles.
func (e *engine) result(src *source, f *file) error {
	sums, reread, err := src.sums.result(src)
	if reread > 0 {
		e.o.Log.Warn().Str("path", storage.ManifestPath(f.rel)).Int64("bytes", reread).Msg("read file again for its checksums: the store read it out of order")
	}
	if err != nil && src.failure() == nil {
		return storage.WithOp("checksum "+strconv.Quote(f.rel), err)
	}
	f.sums = sums
	return nil
}

// alreadyStored reports whether the object at f.key has f's content: same
// size (known from the listing) and the same checksum, compared with the
// strongest one the store keeps. Without a stored checksum the object is
// rewritten: an unverifiable object is not known to be complete.
func (e *engine) alreadyStored(ctx context.Context, src *source, f *file) (bool, error) {
	oi, err := storage.RetryValue(ctx, e.o.Retry, func(ctx context.Context) (storage.ObjectInfo, error) {
		return e.be.Stat(ctx, f.key)
	})
	return e.holds(src, f, oi, err)
}

// holds reports, from a Stat of f.key (oi, err), whether the object there
// has f's content; a Stat that failed is the error (not knowing is not
// "absent").
func (e *engine) holds(src *source, f *file, oi storage.ObjectInfo, err error) (bool, error) {
	if errors.Is(err, storage.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, storage.WithOp("stat "+strconv.Quote(f.key), err)
	}
	if oi.Size != f.size {
		return false, nil
	}
	return e.sameContent(src, f, oi)
}

// sameContent reports whether the stored object oi, of f's size, has f's
// content, by the strongest checksum the store keeps (none: not known to be
// complete, so false).
func (e *engine) sameContent(src *source, f *file, oi storage.ObjectInfo) (bool, error) {
	if f.size == 0 {
		return true, nil // nothing to compare; stores keep no checksum of empty objects
	}
	if !oi.HasCRC32C && oi.MD5 == nil {
		return false, nil
	}
	set := storage.CRC32C
	if !oi.HasCRC32C {
		set |= storage.MD5
	}
	h := storage.NewHasher(set)
	if _, err := storage.CopyBuffer(io.MultiWriter(h, e.prog.Verifying()), io.NewSectionReader(src, 0, f.size)); err != nil {
		return false, nil // src recorded the failure; the caller handles it
	}
	got := h.Sums()
	f.crc = got.CRC32C
	if oi.HasCRC32C {
		return oi.CRC32C == f.crc, nil
	}
	return bytes.Equal(oi.MD5, got.MD5), nil
}
