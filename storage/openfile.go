package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// DefaultOpenTimeout bounds one open of a local file unless the engines are
// told otherwise (TransferOptions.OpenTimeout, kdefer-stage --open-timeout).
// O_NONBLOCK keeps the open of a FIFO from waiting for a writer, but an open
// can still hang where no flag helps (a hard NFS mount whose server went
// away, a FUSE server that does not answer, a device driver): such a file
// costs itself, not the step's deadline. 30 s is long enough for a mount
// that is only slow (an NFS server failing over, a FUSE server paging in)
// to answer, and short against any deadline a run has.
const DefaultOpenTimeout = 30 * time.Second

// ErrOpenHung is wrapped by the error of an open given up after its timeout.
var ErrOpenHung = errors.New("no answer")

// OpenFile opens name under root with flag, non-blocking (O_NONBLOCK changes
// nothing for a regular file or a directory), and gives up when ctx ends or
// after timeout (0: DefaultOpenTimeout); see openWithin. The caller checks
// what it opened: what an earlier Lstat saw may have been swapped since.
func OpenFile(ctx context.Context, root *os.Root, name string, flag int, timeout time.Duration) (*os.File, error) {
	if timeout <= 0 {
		timeout = DefaultOpenTimeout
	}
	return openWithin(ctx, timeout, name, func() (*os.File, error) {
		return root.OpenFile(name, flag|syscall.O_NONBLOCK, 0)
	})
}

// openWithin runs open aside and returns what it returns, or, once ctx ends
// or timeout passes, ctx's error or a timeout naming name. An open given up
// keeps its goroutine until the system call returns (nothing can interrupt
// it), and what it opened is then closed: no descriptor leaks.
func openWithin[F interface {
	comparable
	Close() error
}](ctx context.Context, timeout time.Duration, name string, open func() (F, error)) (F, error) {
	type opened struct {
		f   F
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := open()
		done <- opened{f, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case o := <-done:
		return o.f, o.err
	case <-ctx.Done():
	case <-t.C:
	}
	var none F
	go func() {
		if o := <-done; o.f != none {
			o.f.Close()
		}
	}()
	if err := ctx.Err(); err != nil {
		return none, fmt.Errorf("open %q: %w", name, err)
	}
	return none, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w within %s", ErrOpenHung, timeout)}
}

// OpenRegular opens name under root for reading when it is a regular file
// now, checked on the opened descriptor, non-blocking and bounded in time
// (OpenFile). For callers to whom anything else only means "not usable" (no
// error to report); the caller closes the file.
func OpenRegular(ctx context.Context, root *os.Root, name string, timeout time.Duration) (*os.File, bool) {
	f, err := OpenFile(ctx, root, name, os.O_RDONLY, timeout)
	if err != nil {
		return nil, false
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, false
	}
	return f, true
}

// readDirBatch is how many directory entries ReadDir reads at once: a
// directory of a million files is listed in bounded memory.
const readDirBatch = 1024

// ReadDir calls fn for each entry of the directory dir under root, in
// directory order (sorting would hold a whole directory in memory), and
// stops at fn's first error. It opens dir as a directory only (O_DIRECTORY),
// non-blocking and bounded in time (OpenFile): a directory swapped for a
// FIFO after its parent was listed fails at once (ENOTDIR) instead of
// waiting for a writer for good, SIGTERM included. It reads through root, not
// root.FS(), whose io/fs paths must be valid UTF-8: a directory with any
// other name would be lost.
func ReadDir(ctx context.Context, root *os.Root, dir string, timeout time.Duration, fn func(fs.DirEntry) error) error {
	f, err := OpenFile(ctx, root, dir, os.O_RDONLY|syscall.O_DIRECTORY, timeout)
	if err != nil {
		return err
	}
	defer f.Close()
	return ReadDirFile(ctx, f, fn)
}

// ReadDirFile is ReadDir of a directory already open (OpenDirAt), which it
// does not close.
func ReadDirFile(ctx context.Context, f *os.File, fn func(fs.DirEntry) error) error {
	for {
		ents, err := f.ReadDir(readDirBatch)
		for _, d := range ents {
			if err := fn(d); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(ents) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
