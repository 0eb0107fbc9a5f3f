//go:build unix

package walk_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/stageout/walk"
	"github.com/kdefer/kdefer/storage"
)

// A directory swapped for a FIFO after its parent was listed (the walk
// lists a directory's files before it descends) is skipped with a reason,
// without blocking: a blocking open of the FIFO would wait for a writer for
// good, SIGTERM included.
func TestDirSwappedForFIFO(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Release a blocked open, should there be one.
		if w, err := os.OpenFile(sub, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	filter, err := storage.NewFilter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	skipped := map[string]string{}
	done := make(chan error, 1)
	go func() {
		done <- walk.Walk(context.Background(), root, walk.Options{Filter: filter, Log: zerolog.Nop()}, walk.Visitor{File: func(f walk.File) {
			if f.Rel != "a" {
				return
			}
			if err := os.Remove(sub); err != nil {
				t.Error(err)
			}
			if err := syscall.Mkfifo(sub, 0o644); err != nil {
				t.Error(err)
			}
		}, Skip: func(rel, reason string) { skipped[rel] = reason }})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the walk blocked opening a directory swapped for a FIFO")
	}
	if skipped["sub"] == "" {
		t.Errorf("skipped %q; want sub with its reason", skipped)
	}
}
