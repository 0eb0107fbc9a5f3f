//go:build unix

package stagein_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// The directories from the work volume's root down to stage-in's
// destination may be what another of the pod's init containers, or a
// volume's dataSource, left. One of them a link out of the volume, or a
// FIFO, fails the step at once, permanent, naming it and what it is:
// nothing is written outside the volume, nothing blocks, a dry run
// included.
func TestDestinationBeneathVolume(t *testing.T) {
	tests := []struct {
		name   string
		plant  func(t *testing.T, vol, outside string)
		to     string // below the volume
		bad    string // the component refused, below the volume
		what   string
		dryRun bool
	}{
		{"LinkOut", func(t *testing.T, vol, outside string) {
			mustDo(t, os.Symlink(outside, filepath.Join(vol, "in")))
		}, "in", "in", "a symbolic link", false},
		{"LinkAboveMissing", func(t *testing.T, vol, outside string) {
			mustDo(t, os.Symlink(outside, filepath.Join(vol, "a")))
		}, "a/in", "a", "a symbolic link", false},
		{"RelativeLinkOut", func(t *testing.T, vol, outside string) {
			mustDo(t, os.Symlink(strings.Repeat("../", 16)+strings.TrimPrefix(outside, "/"), filepath.Join(vol, "in")))
		}, "in", "in", "a symbolic link", false},
		{"FIFO", func(t *testing.T, vol, _ string) {
			mustDo(t, syscall.Mkfifo(filepath.Join(vol, "in"), 0o644))
		}, "in", "in", "a FIFO", false},
		{"FIFODryRun", func(t *testing.T, vol, _ string) {
			mustDo(t, syscall.Mkfifo(filepath.Join(vol, "in"), 0o644))
		}, "in", "in", "a FIFO", true},
		{"LinkOutDryRun", func(t *testing.T, vol, outside string) {
			mustDo(t, os.Symlink(outside, filepath.Join(vol, "in")))
		}, "in", "in", "a symbolic link", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			be, loc := storagetest.Open(t, storagetest.Mem(t).URL(t))
			storagetest.Put(t, be, loc.Prefix+"f.txt", []byte("input"))
			vol, outside := t.TempDir(), t.TempDir()
			tc.plant(t, vol, outside)
			o := inOpts(be, loc.KeyURL(loc.Prefix), filepath.Join(vol, tc.to))
			o.VolumeRoot, o.DryRun = vol, tc.dryRun
			bad := filepath.Join(vol, tc.bad)
			t.Cleanup(func() {
				// Release an open of the FIFO that blocked.
				if w, err := os.OpenFile(bad, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
			})
			err := runWithin(t, 5*time.Second, o)
			want := strconv.Quote(bad) + " is " + tc.what
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("stage-in: %v, want an error saying %s", err, want)
			}
			if c := storage.ClassOf(err); c != storage.Permanent {
				t.Errorf("error class %v, want permanent", c)
			}
			if got := stagetest.ReadTree(t, outside); len(got) != 0 {
				t.Errorf("wrote %v outside the volume", got.Keys())
			}
		})
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
