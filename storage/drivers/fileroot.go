package drivers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kdefer/kdefer/storage"
)

// fileRoot reads a file:// directory (Stat, NewReader, List) confined to it.
// gocloud's fileblob opens files by path: it follows any symlink, even one
// to /proc/self/environ, which would copy the stage step's own credentials
// into the volume a stage-in fills, and its blocking open of a FIFO hangs
// forever. A stage-in source may be a volume the untrusted main container
// wrote, so here every file is opened through an os.Root (a symlink may
// point within the directory, never out of it) with O_NONBLOCK, and served
// only if the opened descriptor is a regular file. Writes are confined the
// same way (filewrite.go).
type fileRoot struct {
	root *os.Root
	// dir is the directory, for messages.
	dir string
	// noSidecars: writes leave no sidecar (metadata=skip), so an old one
	// is removed before its object is replaced.
	noSidecars bool
	// dirMode is the mode of the directories a write creates
	// (dir_file_mode, as fileblob).
	dirMode fs.FileMode
	// openTimeout gives up an open that hangs (storage.OpenFile).
	openTimeout time.Duration
}

// fileAttrsExt is the suffix of fileblob's attribute sidecars ("k.attrs"
// holds the MD5 fileblob computed when it wrote "k").
const fileAttrsExt = ".attrs"

// maxAttrsSize bounds what is read of a sidecar: fileblob's are ~200 bytes.
const maxAttrsSize = 64 << 10

func openFileRoot(dir string, noSidecars bool, dirMode fs.FileMode, openTimeout time.Duration) (*fileRoot, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &fileRoot{root: r, dir: dir, noSidecars: noSidecars, dirMode: dirMode, openTimeout: openTimeout}, nil
}

// dropSidecar removes key's sidecar before a write that leaves none.
func (fr *fileRoot) dropSidecar(key string) error {
	if !fr.noSidecars {
		return nil
	}
	name, err := fr.name(key)
	if err != nil {
		return err
	}
	if err := fr.root.Remove(name + fileAttrsExt); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fr.writeError(key, name, fmt.Errorf("remove the stale attributes: %w", err))
	}
	return nil
}

func (fr *fileRoot) Close() error { return fr.root.Close() }

// name returns the file name of key relative to the directory.
func (fr *fileRoot) name(key string) (string, error) {
	if strings.HasSuffix(key, fileAttrsExt) {
		return "", &storage.Error{Class: storage.Permanent, Err: fmt.Errorf("key %q: names ending in %s are reserved by file:// for attributes", key, fileAttrsExt)}
	}
	return fileEscapeKey(key), nil
}

// open opens key's file for reading; it refuses anything but a regular file
// inside the directory, naming the key.
func (fr *fileRoot) open(ctx context.Context, key string) (*os.File, fs.FileInfo, error) {
	name, err := fr.name(key)
	if err != nil {
		return nil, nil, err
	}
	// Non-blocking (opening a FIFO for reading would otherwise wait for a
	// writer) and bounded in time (storage.OpenFile).
	f, err := storage.OpenFile(ctx, fr.root, name, os.O_RDONLY, fr.openTimeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, err
		}
		if errors.Is(err, storage.ErrOpenHung) {
			// A stalled mount may answer again: worth a retry.
			return nil, nil, &storage.Error{Class: storage.Transient, Err: fmt.Errorf("open %q: %w", key, err)}
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, storage.NotExist(key)
		}
		return nil, nil, fr.refuse(key, name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, &storage.Error{Class: storage.Transient, Err: fmt.Errorf("stat %q: %w", key, err)}
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, storage.NotExist(key) // as fileblob: a directory is no object
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fr.notRegular(key, fi.Mode())
	}
	return f, fi, nil
}

// refuse explains an open that failed for another reason than absence.
func (fr *fileRoot) refuse(key, name string, err error) error {
	if fi, lerr := fr.root.Lstat(name); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return &storage.Error{Class: storage.Permanent, Fix: "replace the link with the file itself, or remove it",
			Err: fmt.Errorf("refuse key %q: it is a symbolic link that does not lead to a file inside %s", key, fr.dir)}
	}
	if errors.Is(err, fs.ErrPermission) {
		return &storage.Error{Class: storage.Permanent, Fix: "make the file readable by the stage step's user",
			Err: fmt.Errorf("refuse key %q: %w", key, err)}
	}
	// Any other path error: a parent that is a link out of the directory,
	// not a directory, or a loop; none goes away by retrying.
	return &storage.Error{Class: storage.Permanent, Fix: "keep only regular files and directories under " + fr.dir,
		Err: fmt.Errorf("refuse key %q: %w", key, err)}
}

func (fr *fileRoot) notRegular(key string, mode fs.FileMode) error {
	return &storage.Error{Class: storage.Permanent, Fix: "keep only regular files and directories under " + fr.dir,
		Err: fmt.Errorf("refuse key %q: it is a %s, not a regular file", key, fileKind(mode))}
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	case m.IsDir():
		return "directory"
	}
	return "special file (" + m.Type().String() + ")"
}

// md5 returns the MD5 fileblob recorded for the file name, or nil: a missing,
// unreadable or malformed sidecar only means no checksum is known.
func (fr *fileRoot) md5(ctx context.Context, name string) []byte {
	f, ok := storage.OpenRegular(ctx, fr.root, name+fileAttrsExt, fr.openTimeout)
	if !ok {
		return nil
	}
	defer f.Close()
	var xa struct {
		MD5 []byte `json:"md5"`
	}
	if err := json.NewDecoder(io.LimitReader(f, maxAttrsSize)).Decode(&xa); err != nil || len(xa.MD5) != 16 {
		return nil
	}
	return xa.MD5
}

// Stat returns the MD5 of the sidecar, or, for a file without one (the
// default: no sidecars are written), the CRC32C of its content, read now:
// the file is the object, so its checksum is the store's word, and Stat is
// only called to decide a skip, which reads the other side anyway.
func (fr *fileRoot) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	f, fi, err := fr.open(ctx, key)
	if err != nil {
		return storage.ObjectInfo{}, err
	}
	defer f.Close()
	name, _ := fr.name(key)
	oi := storage.ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime(), MD5: fr.md5(ctx, name)}
	if oi.MD5 == nil && fi.Size() > 0 {
		crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
		if _, err := storage.CopyBuffer(crc, f); err != nil {
			return storage.ObjectInfo{}, &storage.Error{Class: storage.Transient, Err: fmt.Errorf("read %q: %w", key, err)}
		}
		oi.CRC32C, oi.HasCRC32C = crc.Sum32(), true
	}
	return oi, nil
}

type fileReader struct {
	io.Reader
	io.Closer
}

func (fr *fileRoot) NewReader(ctx context.Context, key string, off, length int64) (io.ReadCloser, storage.ObjectInfo, error) {
	f, fi, err := fr.open(ctx, key)
	if err != nil {
		return nil, storage.ObjectInfo{}, err
	}
	oi := storage.ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}
	if off == 0 && length < 0 {
		name, _ := fr.name(key)
		oi.MD5 = fr.md5(ctx, name)
	}
	if off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			f.Close()
			return nil, storage.ObjectInfo{}, &storage.Error{Class: storage.Transient, Err: fmt.Errorf("seek %q: %w", key, err)}
		}
	}
	var r io.Reader = f
	if length >= 0 {
		r = io.LimitReader(f, length)
	}
	return fileReader{Reader: r, Closer: f}, oi, nil
}

// List walks the directory below prefix. An entry it would not serve (a
// symlink leading out, a FIFO, device or socket) is listed with Refused set,
// so a stage-in refuses it, naming it, before writing anything. Only
// directories are opened, as directories, non-blocking and bounded in time
// (storage.ReadDir): the directory may be a volume untrusted code wrote, and
// fs.WalkDir's blocking open of a directory swapped for a FIFO after its
// parent was read would wait for a writer for good, SIGTERM included.
// Entries come in directory order.
func (fr *fileRoot) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	start := "."
	if i := strings.LastIndex(prefix, "/"); i > 0 {
		start = fileEscapeKey(prefix[:i])
	}
	dirs := []string{start}
	for len(dirs) > 0 {
		dir := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		var sub []string
		err := storage.ReadDir(ctx, fr.root, dir, fr.openTimeout, func(d fs.DirEntry) error {
			name := d.Name()
			if dir != "." {
				name = dir + "/" + name
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if d.IsDir() {
				// Skip directories no key under the prefix can be in.
				if k := fileUnescapeKey(name) + "/"; strings.HasPrefix(k, prefix) || strings.HasPrefix(prefix, k) {
					sub = append(sub, name)
				}
				return nil
			}
			return fr.listEntry(ctx, prefix, name, d, fn)
		})
		if err != nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			if errors.Is(err, fs.ErrNotExist) {
				continue // nothing under the prefix, or removed while listed
			}
			if dir == start && errors.Is(err, syscall.ENOTDIR) {
				continue // the prefix names a file: no key is under it
			}
			return fr.listError(dir, err)
		}
		for k := len(sub) - 1; k >= 0; k-- {
			dirs = append(dirs, sub[k])
		}
	}
	return nil
}

// listEntry lists one entry that is not a directory, if its key is under
// prefix.
func (fr *fileRoot) listEntry(ctx context.Context, prefix, name string, d fs.DirEntry, fn func(storage.ObjectInfo) error) error {
	key := fileUnescapeKey(name)
	if strings.HasSuffix(name, fileAttrsExt) || !strings.HasPrefix(key, prefix) {
		return nil
	}
	oi := storage.ObjectInfo{Key: key}
	fi, err := fr.root.Stat(name) // follows a link within the directory only
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist) && d.Type()&fs.ModeSymlink == 0:
		return nil // removed while listed
	case err != nil:
		oi.Refused = fr.refuse(key, name, err)
	case fi.IsDir():
		return nil // a link to a directory: fileblob lists nothing for it either
	case !fi.Mode().IsRegular():
		oi.Refused = fr.notRegular(key, fi.Mode())
	default:
		oi.Size, oi.ModTime, oi.MD5 = fi.Size(), fi.ModTime(), fr.md5(ctx, name)
	}
	return fn(oi)
}

// listError explains a directory List could not read.
func (fr *fileRoot) listError(dir string, err error) error {
	if errors.Is(err, storage.ErrOpenHung) {
		// A stalled mount may answer again: worth a retry.
		return &storage.Error{Class: storage.Transient, Err: fmt.Errorf("list %s: %w", strconv.Quote(dir), err)}
	}
	if errors.Is(err, syscall.ENOTDIR) {
		// A directory when its parent was read, something else now.
		return &storage.Error{Class: storage.Permanent, Fix: "keep only regular files and directories under " + fr.dir,
			Err: fmt.Errorf("list %s: it is no longer a directory: %w", strconv.Quote(dir), err)}
	}
	return &storage.Error{Class: storage.Permanent, Fix: "make the directory readable by the stage step's user", Err: fmt.Errorf("list %s: %w", strconv.Quote(dir), err)}
}
