//go:build unix

package stageout_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// The job's containers own everything below the work volume's root, the
// directories down to the stage-out directory included. One of them swapped
// for a link to a directory outside the volume (the step's own file system:
// its token, its CAs) or for a FIFO fails the step at once, permanent (the
// run fails, the volume is kept), naming the component and what it is;
// nothing outside the volume is uploaded, and nothing blocks.
func TestStageOutDirBeneathVolume(t *testing.T) {
	tests := []struct {
		name  string
		plant func(t *testing.T, vol, outside string)
		from  string // below the volume
		bad   string // the component refused, below the volume
		what  string
	}{
		{"LinkOut", func(t *testing.T, vol, outside string) {
			mustDo(t, os.Symlink(outside, filepath.Join(vol, "out")))
		}, "out", "out", "a symbolic link"},
		{"LinkAbove", func(t *testing.T, vol, outside string) {
			mustDo(t, os.Symlink(filepath.Dir(filepath.Join(outside, "out")), filepath.Join(vol, "a")))
		}, "a/out", "a", "a symbolic link"},
		{"RelativeLinkAbove", func(t *testing.T, vol, outside string) {
			mustDo(t, os.Symlink(strings.Repeat("../", 16)+strings.TrimPrefix(outside, "/"), filepath.Join(vol, "a")))
		}, "a/out", "a", "a symbolic link"},
		{"FIFO", func(t *testing.T, vol, _ string) {
			mustDo(t, syscall.Mkfifo(filepath.Join(vol, "out"), 0o644))
		}, "out", "out", "a FIFO"},
		{"FIFOAbove", func(t *testing.T, vol, _ string) {
			mustDo(t, syscall.Mkfifo(filepath.Join(vol, "a"), 0o644))
		}, "a/out", "a", "a FIFO"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := "mem://beneath/" + tc.name + "/"
			be, loc := storagetest.Open(t, u)
			vol, outside := t.TempDir(), t.TempDir()
			stagetest.MakeTree(t, outside, stagetest.Tree{"secret": []byte("the stage step's token"), "out/secret": []byte("the stage step's CA")})
			stagetest.MakeTree(t, vol, stagetest.Tree{"kept.txt": []byte("the job's")})
			tc.plant(t, vol, outside)
			o := outOpts(be, filepath.Join(vol, tc.from), u)
			o.VolumeRoot = vol
			err := runWithin(t, o, 5*time.Second, filepath.Join(vol, tc.bad))
			want := strconv.Quote(filepath.Join(vol, tc.bad)) + " is " + tc.what
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("stage-out: %v, want an error saying %s", err, want)
			}
			if c := storage.ClassOf(err); c != storage.Permanent {
				t.Errorf("error class %v, want permanent (the run fails and keeps the volume)", c)
			}
			var stored []string
			_ = be.List(context.Background(), loc.Prefix, func(oi storage.ObjectInfo) error { stored = append(stored, oi.Key); return nil })
			if len(stored) > 0 {
				t.Errorf("stored %q, want nothing", stored)
			}
		})
	}
}

// runWithin runs a stage-out and fails the test if it has not returned
// within d; a FIFO at fifo that blocked it is then opened for writing so
// that the test binary can end.
func runWithin(t *testing.T, o stageout.Options, d time.Duration, fifo string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := stageout.Run(context.Background(), o); done <- err }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatalf("stage-out from %s still running after %v: it blocked", o.From, d)
		return nil
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
