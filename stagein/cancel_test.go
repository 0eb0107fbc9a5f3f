package stagein_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// stuckStore is a real store whose object reads never finish and ignore
// their context, as a stalled connection or a careless driver would: they
// either block until closed, or send zeros forever.
type stuckStore struct {
	storage.Backend
	endless bool
	reading chan struct{} // closed once a read has started
	once    sync.Once
}

type blockedReader struct{ closed chan struct{} }

func (r *blockedReader) Read([]byte) (int, error) { <-r.closed; return 0, errors.New("closed") }
func (r *blockedReader) Close() error             { close(r.closed); return nil }

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
func (zeros) Close() error               { return nil }

func (s *stuckStore) NewReader(ctx context.Context, key string, off, length int64) (io.ReadCloser, storage.ObjectInfo, error) {
	_, oi, err := s.Backend.NewReader(ctx, key, off, length)
	if err != nil {
		return nil, oi, err
	}
	s.once.Do(func() { close(s.reading) })
	if s.endless {
		return zeros{}, oi, nil
	}
	return &blockedReader{closed: make(chan struct{})}, oi, nil
}

// A stage-in stops within 2 s of its context's end (SIGTERM), whatever the
// store's reads do, and leaves no file under a final name.
func TestStageInStopsWhenCancelled(t *testing.T) {
	for _, endless := range []bool{false, true} {
		name := map[bool]string{false: "HungRead", true: "EndlessRead"}[endless]
		t.Run(name, func(t *testing.T) {
			be, loc := storagetest.Open(t, storagetest.Mem(t).URL(t))
			for _, k := range []string{"a", "b", "c"} {
				storagetest.Put(t, be, loc.Prefix+k, []byte("content of "+k))
			}
			stuck := &stuckStore{Backend: be, endless: endless, reading: make(chan struct{})}
			dst := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := stagein.Run(ctx, inOpts(stuck, loc.KeyURL(loc.Prefix), dst))
				done <- err
			}()
			select {
			case <-stuck.reading:
			case err := <-done:
				t.Fatalf("stage-in ended before reading: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
			start := time.Now()
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want context.Canceled", err)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("stopped %v after the cancel, want within 2s", d)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("stage-in still running 5s after the cancel")
			}
			if got := stagetest.ReadTree(t, dst); len(got) != 0 {
				t.Errorf("a cancelled stage-in left %v", got.Keys())
			}
		})
	}
}
