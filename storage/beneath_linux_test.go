package storage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// openat2 itself resolves a plain path and refuses a link on the way: the
// component walk, which gives the same answers, is not what runs here
// (where the kernel has openat2).
func TestOpenat2Resolves(t *testing.T) {
	vol, outside := t.TempDir(), t.TempDir()
	mkdirs(t, filepath.Join(vol, "out", "sub"))
	must(t, os.Symlink(outside, filepath.Join(vol, "link")))
	vfd, err := unix.Open(vol, dirFlags, 0)
	must(t, err)
	defer unix.Close(vfd)
	fd, err := openat2Beneath(vfd, "out/sub")
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Skipf("no openat2 here: %v", err)
	}
	if err != nil {
		t.Fatalf("openat2 out/sub: %v", err)
	}
	unix.Close(fd)
	// O_NOFOLLOW|O_DIRECTORY on the link itself: ENOTDIR.
	for rel, want := range map[string]error{"link": unix.ENOTDIR, "link/x": unix.ELOOP} {
		if fd, err := openat2Beneath(vfd, rel); !errors.Is(err, want) {
			unix.Close(fd)
			t.Errorf("openat2 %s: %v, want %v", rel, err, want)
		}
	}
}
