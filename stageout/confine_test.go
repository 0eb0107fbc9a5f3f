//go:build linux

package stageout_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// A file swapped, after the walk, for a FIFO (whose open would block until
// a writer came) or for a symlink out of the directory is refused on the
// descriptor it opened, without blocking and without reading outside; the
// other files are stored.
func TestSwappedAfterWalk(t *testing.T) {
	u := "mem://swapped/run/"
	mem, loc := storagetest.Open(t, u)
	src := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("outside the work volume"), 0o644); err != nil {
		t.Fatal(err)
	}
	stagetest.MakeTree(t, src, stagetest.Tree{"ok.txt": []byte("ok"), "pipe": []byte("was a file"), "link": []byte("was a file")})
	fifo := filepath.Join(src, "pipe")
	be := &hookBackend{Backend: mem, afterWalk: func() {
		if err := os.Remove(fifo); err != nil {
			t.Error(err)
		}
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Error(err)
		}
		if err := os.Remove(filepath.Join(src, "link")); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(outside, filepath.Join(src, "link")); err != nil {
			t.Error(err)
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := stageout.Run(context.Background(), outOpts(be, src, u))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stage-out: %v", err)
		}
	case <-time.After(10 * time.Second):
		// Unblock the open so the test binary can end.
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("stage-out still running 10 s after it began: the open of a FIFO blocked")
	}
	m := readManifest(t, mem, loc)
	var keys []string
	for _, f := range m.Files {
		keys = append(keys, f.Key)
	}
	slices.Sort(keys)
	if diff := cmp.Diff([]string{"ok.txt"}, keys); diff != "" {
		t.Errorf("stored (-want +got):\n%s", diff)
	}
	want := []stagecontract.UnsavedFile{{Path: "link", Reason: "path escapes from parent"}, {Path: "pipe", Reason: "not a regular file"}}
	if diff := cmp.Diff(want, m.Unsaved); diff != "" {
		t.Errorf("unsaved (-want +got):\n%s", diff)
	}
}
