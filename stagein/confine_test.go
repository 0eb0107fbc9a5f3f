package stagein_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// runWithin runs a stage-in and fails the test if it has not returned
// within d: a FIFO must not block it.
func runWithin(t *testing.T, d time.Duration, o stagein.Options) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := stagein.Run(context.Background(), o); done <- err }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("stage-in from %s still running after %v", o.From, d)
		return nil
	}
}

// A file:// source is a directory the untrusted main container may have
// written (a volume from a dataSource). Stage-in serves regular files inside
// it only: a link to the stage step's own environment, to a file outside,
// or a FIFO is refused by name, and nothing of it reaches the destination.
func TestFileSourceConfined(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("outside-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Another process's environment would not do: /proc/self is the stage
	// step itself, whatever credentials it holds.
	environ, _ := os.ReadFile("/proc/self/environ")
	tests := []struct {
		name   string
		plant  func(path string) error
		secret []byte
		want   string
	}{
		{"SymlinkToEnviron", func(p string) error { return os.Symlink("/proc/self/environ", p) }, environ, "symbolic link"},
		{"SymlinkOutside", func(p string) error { return os.Symlink(outside, p) }, []byte("outside-secret"), "symbolic link"},
		{"RelativeSymlinkOutside", func(p string) error { return os.Symlink("../../../../../../../../.."+outside, p) }, []byte("outside-secret"), "symbolic link"},
		{"ParentSymlinkOutside", func(p string) error {
			if err := os.Symlink(filepath.Dir(outside), filepath.Dir(p)); err != nil {
				return err
			}
			return nil
		}, []byte("outside-secret"), "refuse key"},
		{"FIFO", func(p string) error { return syscall.Mkfifo(p, 0o644) }, nil, "FIFO"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := filepath.Join(t.TempDir(), "src"), filepath.Join(t.TempDir(), "dst")
			stagetest.MakeTree(t, src, stagetest.Tree{"ok.txt": []byte("fine")})
			bad, key := filepath.Join(src, "bad"), "bad"
			if tc.name == "ParentSymlinkOutside" {
				bad, key = filepath.Join(src, "sub", "secret.txt"), "sub" // the walk does not enter the link
			}
			if err := tc.plant(bad); err != nil {
				t.Fatal(err)
			}
			be, _ := storagetest.Open(t, "file://"+src)
			t.Cleanup(func() {
				// Release a reader a blocking open of the FIFO left waiting.
				if f, err := os.OpenFile(bad, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
			})
			err := runWithin(t, 10*time.Second, inOpts(be, "file://"+src, dst))
			if err == nil || storage.ClassOf(err) != storage.Permanent {
				t.Errorf("stage-in of %s: err = %v, want a permanent error", tc.name, err)
			} else if !strings.Contains(err.Error(), `"`+key+`"`) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("stage-in of %s: err = %v, want it to name key %q and say %q", tc.name, err, key, tc.want)
			}
			got := stagetest.ReadTree(t, filepath.Dir(dst))
			for name, data := range got {
				if len(tc.secret) > 0 && bytes.Contains(data, tc.secret) {
					t.Errorf("the destination holds %s, with what %q points to", name, key)
				}
				if strings.HasSuffix(name, key) {
					t.Errorf("the destination holds %s", name)
				}
			}
		})
	}
}

// Stage-in never writes through a symlink already in the destination: a
// planted temporary-name link to a file inside (or outside) is replaced,
// not followed.
func TestDestinationTempSymlink(t *testing.T) {
	ctx := context.Background()
	for _, inside := range []bool{true, false} {
		name := map[bool]string{true: "Inside", false: "Outside"}[inside]
		t.Run(name, func(t *testing.T) {
			be, loc := storagetest.Open(t, storagetest.Mem(t).URL(t))
			storagetest.Put(t, be, loc.Prefix+"f.txt", []byte("new content"))
			dst := t.TempDir()
			victim := filepath.Join(dst, "victim")
			if !inside {
				victim = filepath.Join(t.TempDir(), "victim")
			}
			if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			target := victim
			if inside {
				target = "victim" // relative: os.Root follows it
			}
			if err := os.Symlink(target, filepath.Join(dst, "f.txt"+stagein.TempSuffix)); err != nil {
				t.Fatal(err)
			}
			_, err := stagein.Run(ctx, inOpts(be, loc.KeyURL(loc.Prefix), dst))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(victim); string(got) != "keep" {
				t.Errorf("victim = %q after stage-in: written through the planted link", got)
			}
			fi, err := os.Lstat(filepath.Join(dst, "f.txt"))
			if err != nil || !fi.Mode().IsRegular() {
				t.Errorf("f.txt: %v, mode %v; want a regular file", err, fi.Mode())
			}
			if got, _ := os.ReadFile(filepath.Join(dst, "f.txt")); string(got) != "new content" {
				t.Errorf("f.txt = %q", got)
			}
		})
	}
}
