//go:build unix

package storage

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// withResolvers runs fn with openat2, and again with the component walk
// alone (a kernel or seccomp profile without openat2).
func withResolvers(t *testing.T, fn func(t *testing.T)) {
	t.Run("openat2", fn)
	t.Run("walk", func(t *testing.T) {
		defer func(old func(int, string) (int, error)) { openat2 = old }(openat2)
		openat2 = func(int, string) (int, error) { return -1, unix.ENOSYS }
		fn(t)
	})
}

// openBounded calls OpenDirBeneath and fails the test if it takes more
// than a few seconds: nothing in a local tree may block it.
func openBounded(t *testing.T, volume, dir string, create bool) (*os.Root, error) {
	t.Helper()
	start := time.Now()
	r, err := OpenDirBeneath(context.Background(), volume, dir, create, 5*time.Second)
	if d := time.Since(start); d > 3*time.Second || errors.Is(err, ErrOpenHung) {
		t.Fatalf("OpenDirBeneath(%q, %q) took %v: %v", volume, dir, d, err)
	}
	return r, err
}

// Every component between the volume's root and the directory asked for is
// a directory, or the open fails naming the first that is not and what it
// is, classified permanent: a link (to a directory outside, to /, or even
// inside the volume), a FIFO (at once, not blocking), a regular file. A
// missing directory is not-exist unless create makes it, never through a
// link; a path outside the volume is a usage error. Without a volume root,
// the path given is trusted, links included, but a FIFO still fails at once.
func TestOpenDirBeneath(t *testing.T) {
	withResolvers(t, func(t *testing.T) {
		vol, outside := t.TempDir(), t.TempDir()
		mkdirs(t, filepath.Join(vol, "out", "sub"), filepath.Join(outside, "sub"))
		if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		at := func(p string) string { return filepath.Join(vol, p) }
		must(t, os.Symlink(outside, at("link-out")))
		must(t, os.Symlink("/", at("link-root")))
		must(t, os.Symlink("out", at("link-in")))
		must(t, os.WriteFile(at("file"), nil, 0o644))
		must(t, syscall.Mkfifo(at("fifo"), 0o644))
		legacy := filepath.Join(t.TempDir(), "legacy")
		must(t, os.Symlink(filepath.Join(vol, "out"), legacy))

		tests := []struct {
			name, volume, dir string
			create            bool
			same              string // the directory opened, when it opens
			notDir, what      string // the component refused, and what it is
			class             Class
			notExist          bool
		}{
			{name: "Plain", volume: vol, dir: at("out/sub"), same: at("out/sub")},
			{name: "Root", volume: vol, dir: vol, same: vol},
			{name: "LinkOut", volume: vol, dir: at("link-out"), notDir: at("link-out"), what: "a symbolic link"},
			{name: "LinkToSlash", volume: vol, dir: at("link-root"), notDir: at("link-root"), what: "a symbolic link"},
			{name: "LinkInside", volume: vol, dir: at("link-in"), notDir: at("link-in"), what: "a symbolic link"},
			{name: "LinkAbove", volume: vol, dir: at("link-out/sub"), notDir: at("link-out"), what: "a symbolic link"},
			{name: "FIFO", volume: vol, dir: at("fifo"), notDir: at("fifo"), what: "a FIFO"},
			{name: "FIFOAbove", volume: vol, dir: at("fifo/x"), notDir: at("fifo"), what: "a FIFO"},
			{name: "File", volume: vol, dir: at("file"), notDir: at("file"), what: "a regular file"},
			{name: "Missing", volume: vol, dir: at("out/none"), notExist: true, class: Permanent},
			{name: "Create", volume: vol, dir: at("out/new/deeper"), create: true, same: at("out/new/deeper")},
			{name: "CreateThroughLink", volume: vol, dir: at("link-out/new"), create: true, notDir: at("link-out"), what: "a symbolic link"},
			{name: "NotInside", volume: vol, dir: outside, class: Usage},
			{name: "DotDot", volume: vol, dir: vol + "/out/../../x", class: Usage},
			{name: "NoVolumeRootTrustsLinks", dir: legacy, same: at("out")},
			{name: "NoVolumeRootFIFO", dir: at("fifo"), notDir: at("fifo"), what: "a FIFO"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r, err := openBounded(t, tc.volume, tc.dir, tc.create)
				if tc.same != "" {
					if err != nil {
						t.Fatalf("open: %v", err)
					}
					defer r.Close()
					assertSame(t, r, tc.same)
					return
				}
				if err == nil {
					r.Close()
					t.Fatal("opened, want an error")
				}
				var nd *NotDirError
				switch {
				case tc.notDir != "":
					if !errors.As(err, &nd) || nd.Path != tc.notDir || nd.What != tc.what {
						t.Fatalf("error %v, want %q is %s", err, tc.notDir, tc.what)
					}
					if c, fix := Classify(err); c != Permanent || fix != NotDirFix {
						t.Errorf("class %v, fix %q: want permanent with NotDirFix", c, fix)
					}
				case tc.notExist && !errors.Is(err, fs.ErrNotExist):
					t.Fatalf("error %v, want not-exist", err)
				}
				if tc.class != Transient && ClassOf(err) != tc.class {
					t.Errorf("error %v is %v, want %v", err, ClassOf(err), tc.class)
				}
			})
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 2 {
			t.Errorf("outside holds %d entries, want its 2: a create went through a link", len(ents))
		}
	})
}

// The root is opened through the resolved descriptor, not its name: a
// directory renamed away and replaced by a link out after resolution is
// still the one the root opens.
func TestRootOfIgnoresSwaps(t *testing.T) {
	vol, outside := t.TempDir(), t.TempDir()
	mkdirs(t, filepath.Join(vol, "out"))
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	vfd, err := unix.Open(vol, dirFlags, 0)
	must(t, err)
	defer unix.Close(vfd)
	fd, err := resolve(vfd, vol, "out", false)
	must(t, err)
	defer unix.Close(fd)
	must(t, os.Rename(filepath.Join(vol, "out"), filepath.Join(vol, "moved")))
	must(t, os.Symlink(outside, filepath.Join(vol, "out")))
	r, err := rootOf(fd, filepath.Join(vol, "out"))
	must(t, err)
	defer r.Close()
	assertSame(t, r, filepath.Join(vol, "moved"))
	if _, err := r.Stat("secret"); err == nil {
		t.Error("the root sees the secret outside")
	}
}

func assertSame(t *testing.T, r *os.Root, dir string) {
	t.Helper()
	got, err := r.Stat(".")
	must(t, err)
	want, err := os.Lstat(dir)
	must(t, err)
	if !os.SameFile(got, want) {
		t.Errorf("opened a directory other than %s", dir)
	}
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		must(t, os.MkdirAll(d, 0o755))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
