//go:build unix

package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An open that hangs (here a blocking open of a real FIFO with no writer,
// as a dead NFS server or a silent FUSE server would hang one) is given up
// after the timeout with an error naming the file, and when ctx ends with
// ctx's error; the open finishing later leaks no descriptor.
func TestOpenWithinGivesUpOnAHungOpen(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	hang := func() (*os.File, error) { return os.OpenFile(fifo, os.O_RDONLY, 0) } // blocks until a writer opens
	t.Cleanup(func() {
		// Release the opens given up: each waits for a writer. One writer's
		// open releases every reader waiting then, so a blocking second open
		// could wait forever (seen: the package hung 400 s in CI); a
		// non-blocking open fails at once when no reader waits, and a few
		// tries over a second catch an open that was slow to start.
		for range 20 {
			if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	start := time.Now()
	f, err := openWithin(context.Background(), 200*time.Millisecond, "pipe", hang)
	var pe *os.PathError
	if f != nil || !errors.As(err, &pe) || !errors.Is(err, ErrOpenHung) || !strings.Contains(err.Error(), `pipe: no answer within 200ms`) {
		t.Errorf("hung open = %v, %v; want a path error naming the file and the timeout", f, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %s", d)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if f, err := openWithin(ctx, time.Hour, "pipe", hang); f != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hung open past ctx's deadline = %v, %v; want ctx's error", f, err)
	}
}

// OpenFile opens a FIFO without waiting for a writer, and OpenRegular
// refuses it on the opened descriptor.
func TestOpenFileFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx := context.Background()
	f, err := OpenFile(ctx, root, "pipe", os.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("OpenFile of a FIFO: %v", err)
	}
	f.Close()
	if f, ok := OpenRegular(ctx, root, "pipe", 0); ok {
		f.Close()
		t.Error("OpenRegular opened a FIFO")
	}
}
