package drivers

import (
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/kdefer/kdefer/storage"
)

// Writes to a file:// directory, confined to it as its reads are
// (fileroot.go). gocloud's fileblob writes by path: its MkdirAll, temporary
// file, rename and ".attrs" sidecar all follow a symlinked directory out of
// the directory, and its Delete removes through one. A stage-out destination
// may hold links (a volume untrusted code wrote, or links from before), so
// every write goes through the os.Root instead: no path component is
// followed out of it, the temporary file is created beside the object inside
// it (O_EXCL: an entry planted at that name fails the create instead of
// being written through), and the rename replaces whatever entry holds the
// final name, a link included, rather than writing where it points.

// fileAttrs is fileblob's sidecar ("k.attrs"), field for field, so that
// directories written with metadata=sidecar read the same with either.
type fileAttrs struct {
	CacheControl       string            `json:"user.cache_control"`
	ContentDisposition string            `json:"user.content_disposition"`
	ContentEncoding    string            `json:"user.content_encoding"`
	ContentLanguage    string            `json:"user.content_language"`
	ContentType        string            `json:"user.content_type"`
	Metadata           map[string]string `json:"user.metadata"`
	MD5                []byte            `json:"md5"`
}

// Put writes src to key's file through a temporary file beside it, renamed
// over the final name only once complete and not cancelled: a reader never
// sees half an object, and a cancelled write leaves none.
func (fr *fileRoot) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts storage.PutOptions) (uint32, error) {
	name, err := fr.name(key)
	if err != nil {
		return 0, err
	}
	if dir := path.Dir(name); dir != "." {
		if err := fr.root.MkdirAll(dir, fr.dirMode); err != nil {
			return 0, fr.writeError(key, name, err)
		}
	}
	if err := fr.dropSidecar(key); err != nil {
		return 0, err
	}
	cr := &storage.CRCReader{R: io.NewSectionReader(src, 0, size), OnN: opts.Progress}
	var sum hash.Hash
	r := io.Reader(cr)
	if !fr.noSidecars {
		sum = md5.New() // fileblob records it: readers verify with it
		r = io.TeeReader(cr, sum)
	}
	tmp, err := fr.writeTemp(ctx, key, name, r, size)
	if err != nil {
		return 0, err
	}
	if sum != nil {
		attrs := fileAttrs{ContentType: opts.ContentType, MD5: sum.Sum(nil)}
		if err := fr.writeSidecar(ctx, key, name, attrs); err != nil {
			_ = fr.root.Remove(tmp)
			return 0, err
		}
	}
	if err := fr.root.Rename(tmp, name); err != nil {
		_ = fr.root.Remove(tmp)
		if sum != nil {
			_ = fr.root.Remove(name + fileAttrsExt) // describes no object now
		}
		return 0, fr.writeError(key, name, err)
	}
	return cr.CRC(), nil
}

// writeSidecar writes key's sidecar the way Put writes an object, so that a
// link planted at the sidecar's name is replaced, not written through.
func (fr *fileRoot) writeSidecar(ctx context.Context, key, name string, attrs fileAttrs) error {
	b, err := json.Marshal(attrs)
	if err != nil {
		return fmt.Errorf("encode the attributes of %q: %w", key, err)
	}
	b = append(b, '\n') // as fileblob's json.Encoder writes it
	tmp, err := fr.writeTemp(ctx, key, name+fileAttrsExt, strings.NewReader(string(b)), int64(len(b)))
	if err != nil {
		return err
	}
	if err := fr.root.Rename(tmp, name+fileAttrsExt); err != nil {
		_ = fr.root.Remove(tmp)
		return fr.writeError(key, name, err)
	}
	return nil
}

// writeTemp writes exactly size bytes of r to a new temporary file beside
// name and returns its name; on any failure, or when ctx is cancelled, it
// removes the file again.
func (fr *fileRoot) writeTemp(ctx context.Context, key, name string, r io.Reader, size int64) (string, error) {
	f, tmp, err := fr.createTemp(name)
	if err != nil {
		return "", fr.writeError(key, name, err)
	}
	// Every read checks ctx: a cancelled write stops within one buffer.
	cr := storage.ContextReader(ctx, io.NopCloser(r))
	defer cr.Close()
	n, err := storage.CopyBuffer(storage.FileWriter(f), cr)
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		_ = fr.root.Remove(tmp)
		return "", fmt.Errorf("write %q: %w", key, err)
	}
	return tmp, nil
}

// createTemp creates a file named after name (as fileblob names its
// temporary files, name.<hex>.tmp) with O_EXCL, trying other names while
// one exists.
func (fr *fileRoot) createTemp(name string) (*os.File, string, error) {
	for try := 0; ; try++ {
		tmp := name + "." + strconv.FormatUint(rand.Uint64(), 16) + ".tmp"
		f, err := fr.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) && try < 100 {
			continue
		}
		return f, tmp, err
	}
}

// Delete removes key's file and its sidecar, through the root: a link
// planted as a directory of the key is refused, never removed through.
func (fr *fileRoot) Delete(key string) error {
	name, err := fr.name(key)
	if err != nil {
		return err
	}
	for _, n := range []string{name, name + fileAttrsExt} {
		if err := fr.root.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fr.writeError(key, name, err)
		}
	}
	return nil
}

// writeError explains a write of key (file name) that the directory refused.
// A link among the key's directories is the usual cause of a refusal that
// is neither missing permission nor space: os.Root does not follow one out.
func (fr *fileRoot) writeError(key, name string, err error) error {
	if link := fr.linkAmong(path.Dir(name)); link != "" {
		return &storage.Error{Class: storage.Permanent, Fix: "replace the link with a directory, or remove it",
			Err: fmt.Errorf("refuse key %q: %s is a symbolic link, and writes never follow one out of %s: %w",
				key, strconv.Quote(fileUnescapeKey(link)), fr.dir, err)}
	}
	switch {
	case errors.Is(err, fs.ErrPermission):
		return &storage.Error{Class: storage.Permanent, Fix: "make the directory writable by the stage step's user",
			Err: fmt.Errorf("write key %q: %w", key, err)}
	case errors.Is(err, syscall.ENOTDIR):
		return &storage.Error{Class: storage.Permanent, Fix: "remove the file that stands where a directory of the key must be",
			Err: fmt.Errorf("write key %q: %w", key, err)}
	}
	class, fix := storage.Classify(err)
	return &storage.Error{Class: class, Fix: fix, Err: fmt.Errorf("write key %q: %w", key, err)}
}

// linkAmong returns the first of dir and its parents, from the top, that is
// a symbolic link, or "".
func (fr *fileRoot) linkAmong(dir string) string {
	if dir == "." {
		return ""
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		fi, err := fr.root.Lstat(p)
		if err != nil {
			return ""
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return p
		}
	}
	return ""
}
