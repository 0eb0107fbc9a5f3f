package stageout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/kdefer/kdefer/storage"
)

// source is an opened file as the backends read it: exactly size bytes (the
// size fstat gave when it was opened) from offset 0, as often as retries
// need, from several parts at once. Reading exactly that many bytes is what
// keeps an object consistent with its manifest entry when the file grows
// while it is read; a read that ends early means it shrank.
//
// source remembers the first local failure, so that a failed Put can be told
// apart from a failed store: a local failure costs one file (unsaved), a
// store failure is the run's (retried, then exit 1).
//
// Every read checks ctx: a store whose write ignores cancellation (gocloud's
// file:// writer copies to the end) stops at its next read instead.
type source struct {
	ctx  context.Context
	f    *os.File
	size int64
	// sums, when set, hashes what is read (the optional checksums).
	sums *sums

	mu  sync.Mutex
	err error
}

func (s *source) ReadAt(p []byte, off int64) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, fmt.Errorf("stop reading: %w", err) // not the file's failure
	}
	n, err := s.f.ReadAt(p, off)
	if n > 0 && s.sums != nil {
		s.sums.saw(p[:n], off)
	}
	if err == nil || (errors.Is(err, io.EOF) && off+int64(n) >= s.size) {
		return n, err
	}
	if errors.Is(err, io.EOF) {
		err = errChanged // backends only ask for bytes below size
	}
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	return n, err
}

// failure returns the first local failure, or nil.
func (s *source) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// retry runs fn under the retry policy, except after a local failure: reading
// the same file again with the same size cannot succeed, and the caller
// decides what to do about the file.
func (e *engine) retry(ctx context.Context, src *source, fn func(ctx context.Context) error) error {
	return e.o.Retry.Do(ctx, func(ctx context.Context) error {
		err := fn(ctx)
		if err != nil && src.failure() != nil {
			return &storage.Error{Class: storage.Permanent, Err: err}
		}
		return err
	})
}
