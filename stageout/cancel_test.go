package stageout_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// deafBackend's Put reads its source slowly and ignores cancellation, as
// gocloud's writers do (a file:// write runs to the end of the file).
type deafBackend struct{ storage.Backend }

func (deafBackend) Put(_ context.Context, _ string, src io.ReaderAt, size int64, _ storage.PutOptions) (uint32, error) {
	buf := make([]byte, 64<<10)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := src.ReadAt(buf[:min(int64(len(buf)), size-off)], off); err != nil {
			return 0, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, nil
}

// Cancelling a stage-out stops it within 2 s even when the store's write
// ignores the context: every read of a file checks it.
func TestCancelStopsCopy(t *testing.T) {
	mem, _ := storagetest.Open(t, "mem://cancel/run/")
	src := t.TempDir()
	// 16 MiB at 64 KiB per 20 ms: ~5 s per file if nothing stops it.
	stagetest.MakeTree(t, src, stagetest.Tree{"a.bin": make([]byte, 16<<20), "b.bin": make([]byte, 16<<20)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := stageout.Run(ctx, outOpts(deafBackend{mem}, src, "mem://cancel/run/"))
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		t.Logf("stopped %v after cancel: %v", time.Since(start).Round(time.Millisecond), err)
		if err == nil {
			t.Error("a cancelled stage-out succeeded")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("stage-out still running 2 s after cancel")
	}
}
