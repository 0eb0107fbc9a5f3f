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

// OpenDirAt opens the directory name in the open directory parent, relative
// to parent's descriptor: one openat with dirFlags (no link followed, no
// FIFO or device opened), bounded in time (openWithin; 0:
// DefaultOpenTimeout). A walk that opens each directory this way costs one
// open per directory at any depth, where opening by its path from the root
// costs one per component (quadratic in the depth), and no path grows
// past PATH_MAX. p names the directory in errors. The caller closes it.
func OpenDirAt(ctx context.Context, parent *os.File, name, p string, timeout time.Duration) (*os.File, error) {
	if timeout <= 0 {
		timeout = DefaultOpenTimeout
	}
	return openWithin(ctx, timeout, p, func() (*os.File, error) {
		var fd int
		err := withFd(parent, func(pfd int) error {
			var err error
			fd, err = retryEINTR(func() (int, error) { return unix.Openat(pfd, name, dirFlags, 0) })
			return err
		})
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		return os.NewFile(uintptr(fd), p), nil
	})
}

// withFd runs fn with f's descriptor, which stays open meanwhile
// (SyscallConn: unlike Fd, it leaves the file's mode alone).
func withFd(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// ReadlinkAt returns the text of the symbolic link name in the open
// directory dir.
func ReadlinkAt(dir *os.File, name string) (string, error) {
	var target string
	err := withFd(dir, func(fd int) error {
		buf := make([]byte, 256)
		for {
			n, err := unix.Readlinkat(fd, name, buf)
			if err != nil {
				return err
			}
			if n < len(buf) {
				target = string(buf[:n])
				return nil
			}
			if len(buf) >= 1<<16 {
				return unix.ENAMETOOLONG
			}
			buf = make([]byte, 2*len(buf))
		}
	})
	return target, err
}

// LstatAt is Lstat of the entry name in the open directory dir, relative to
// its descriptor (fstatat): the DirEntry of a directory opened by OpenDirAt
// would stat its path instead. Sys returns a *unix.Stat_t.
func LstatAt(dir *os.File, name string) (fs.FileInfo, error) {
	st := &unix.Stat_t{}
	err := withFd(dir, func(fd int) error {
		for {
			err := unix.Fstatat(fd, name, st, unix.AT_SYMLINK_NOFOLLOW)
			if !errors.Is(err, unix.EINTR) {
				return err
			}
		}
	})
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return &statInfo{name: name, st: st}, nil
}

// statInfo is the fs.FileInfo of a unix.Stat_t.
type statInfo struct {
	name string
	st   *unix.Stat_t
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return s.st }

func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch uint32(s.st.Mode) & unix.S_IFMT { //nolint:unconvert // Mode is uint16 on some platforms
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	return m
}
