//go:build unix

package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dirFlags open a directory and nothing else: not through a link
// (O_NOFOLLOW), and without waiting on a FIFO or a device's driver
// (O_DIRECTORY refuses them before they are opened; O_NONBLOCK is the
// second line).
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC

// OpenDirBeneath opens dir, which lies in volume, as an os.Root, resolving
// every component of dir below volume inside volume without following a
// link: one openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or, where the
// kernel or the seccomp profile lacks it, one component at a time with
// O_NOFOLLOW; each opened as a directory only, non-blocking (dirFlags), the
// whole bounded by timeout (openWithin; 0: DefaultOpenTimeout).
//
// volume is the work volume's mount point, which kdefer controls; what lies
// below it is what the job's untrusted containers left. A link there would
// make a stage step walk or write its own file system (its token, its
// CAs, /etc), a FIFO would hold it until its deadline: a component that is
// not a directory fails at once, with a permanent *NotDirError naming it
// (Classify). volume "" trusts dir's whole path, links included: dir is
// then the root (a run by hand, or a step an older controller built).
//
// create makes what is missing (stage-in's destination): volume as
// os.MkdirAll does, the components below it one at a time beneath it.
func OpenDirBeneath(ctx context.Context, volume, dir string, create bool, timeout time.Duration) (*os.Root, error) {
	if volume == "" {
		volume = dir
	}
	rel, err := filepath.Rel(volume, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, Usagef("%s is not inside the volume root %s", strconv.Quote(dir), strconv.Quote(volume))
	}
	if timeout <= 0 {
		timeout = DefaultOpenTimeout
	}
	return openWithin(ctx, timeout, dir, func() (*os.Root, error) { return openBeneath(volume, rel, create) })
}

func openBeneath(volume, rel string, create bool) (*os.Root, error) {
	if create {
		if err := os.MkdirAll(volume, 0o755); err != nil {
			return nil, err
		}
	}
	// The volume's own path is trusted: links in it are followed.
	vfd, err := retryEINTR(func() (int, error) { return unix.Open(volume, dirFlags&^unix.O_NOFOLLOW, 0) })
	if err != nil {
		var st unix.Stat_t
		return nil, describe(unix.Stat(volume, &st), st, volume, err)
	}
	defer unix.Close(vfd)
	fd, err := resolve(vfd, volume, rel, create)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return rootOf(fd, filepath.Join(volume, rel))
}

// resolve opens rel under vfd (the volume's root, at volume) with openat2.
// Where openat2 is missing (ENOSYS: Linux before 5.6; EPERM: a seccomp
// profile older than it) the component walk does the same; it also runs
// after any other failure, to name the component at fault and what it is,
// and to create what is missing. Either way nothing outside vfd's tree is
// opened: the walk never goes up and follows no link.
func resolve(vfd int, volume, rel string, create bool) (int, error) {
	fd, err := openat2(vfd, rel)
	for i := 0; i < 3 && (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR)); i++ {
		fd, err = openat2(vfd, rel) // a rename raced the lookup
	}
	if err == nil {
		return fd, nil
	}
	return walkBeneath(vfd, volume, rel, create)
}

// openat2 is openat2Beneath; the tests take it away to run the walk alone.
var openat2 = openat2Beneath

// walkBeneath opens rel under vfd one component at a time, each with
// dirFlags from the one before, creating those missing when create.
func walkBeneath(vfd int, volume, rel string, create bool) (int, error) {
	fd, err := retryEINTR(func() (int, error) { return unix.Openat(vfd, ".", dirFlags, 0) })
	if err != nil || rel == "." {
		return fd, err
	}
	p := volume
	for _, name := range strings.Split(rel, "/") {
		p = filepath.Join(p, name)
		open := func() (int, error) { return unix.Openat(fd, name, dirFlags, 0) }
		next, err := retryEINTR(open)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, name, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = retryEINTR(open)
			}
		}
		if err != nil {
			var st unix.Stat_t
			err = describe(unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW), st, p, err)
			unix.Close(fd)
			return -1, err
		}
		unix.Close(fd)
		fd = next
	}
	return fd, nil
}

// describe turns the failed open of the directory at p into its error: a
// *NotDirError when the stat of what is there (statErr, st) says it is no
// directory, else the open's error (a missing directory, permission).
func describe(statErr error, st unix.Stat_t, p string, openErr error) error {
	if statErr == nil {
		what := ""
		switch uint32(st.Mode) & unix.S_IFMT {
		case unix.S_IFLNK:
			what = "a symbolic link"
		case unix.S_IFIFO:
			what = "a FIFO"
		case unix.S_IFCHR, unix.S_IFBLK:
			what = "a device"
		case unix.S_IFSOCK:
			what = "a socket"
		case unix.S_IFREG:
			what = "a regular file"
		}
		if what != "" {
			return &NotDirError{Path: p, What: what}
		}
	}
	return &fs.PathError{Op: "open", Path: p, Err: openErr}
}

// rootOf returns an os.Root of the directory fd is open on, named name.
// os.Root opens paths only, so it opens fd's entry in fdDir. That is a
// magic link to the open directory itself, not a name looked up again:
// nothing done to the tree since fd was resolved (a component renamed,
// a link planted where it was) changes what it opens. The device and
// inode are compared all the same, should fdDir not be what it should.
func rootOf(fd int, name string) (*os.Root, error) {
	r, err := os.OpenRoot(fdDir + strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("open %s through its descriptor: %w", strconv.Quote(name), err)
	}
	var want unix.Stat_t
	fi, err := r.Stat(".")
	if err == nil {
		err = unix.Fstat(fd, &want)
	}
	if err == nil {
		if got, ok := fi.Sys().(*syscall.Stat_t); !ok || uint64(got.Dev) != uint64(want.Dev) || uint64(got.Ino) != uint64(want.Ino) {
			err = fmt.Errorf("%s is not the directory resolved", fdDir)
		}
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("open %s through its descriptor: %w", strconv.Quote(name), err)
	}
	return r, nil
}

func retryEINTR(f func() (int, error)) (int, error) {
	for {
		fd, err := f()
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}
