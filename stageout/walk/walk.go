// Package walk lists the files a stage-out uploads from a directory that
// untrusted code wrote: names of any bytes, links, FIFOs, devices, unreadable
// entries. It is apart from package stageout, and depends on the storage core
// alone, so that its fuzz target builds without the storage drivers and
// their SDKs (a fuzz build instruments every package it compiles).
package walk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// Reasons a file is listed as unsaved. They are for people (the manifest and
// the log), stable so that tests and runbooks can match them.
const (
	ReasonVanished   = "vanished after the walk"
	ReasonNotRegular = "not a regular file"
	// A symbolic link whose text is absolute, or goes up past the root, or
	// that resolves out of it through other links.
	ReasonLinkOut = "symbolic link leads out of the directory"
	// A symbolic link to nothing, inside the root.
	ReasonLinkDangling = "symbolic link leads to nothing"
	// A symbolic link whose text a manifest cannot record (JSON carries
	// valid UTF-8 only) or the kernel would not follow.
	ReasonLinkText = "symbolic link text is not valid UTF-8, or longer than PATH_MAX"
)

// File is a file the walk chose: its path relative to the root, its object
// key, and what Lstat said of it.
type File struct {
	Rel, Key string
	Encoded  bool // Key is not Rel (storage.EncodeName)
	Size     int64
	ModTime  time.Time
}

// Link is a name the walk chose that is stored as a link: another name of
// a file already chosen (Kind stagecontract.LinkHard, Target that File's
// Rel), or a symbolic link that resolves inside the root
// (stagecontract.LinkSymbolic, Target its text as written).
type Link struct {
	Rel, Target, Kind string
}

// Visitor is what the walk reports to: each file to store, each link to
// record, and each entry it chose but cannot stage, with the reason.
type Visitor struct {
	File func(File)
	Link func(Link)
	Skip func(rel, reason string)
}

// Reason turns a local error met opening or reading a file into the reason
// recorded for it. A permission error names the user stage-out runs as,
// which is what the fix depends on.
func Reason(err error) string {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ReasonVanished
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("permission denied (stage-out runs as uid %d, gid %d)", os.Geteuid(), os.Getegid())
	case errors.As(err, &pe):
		return pe.Err.Error() // the path is in the entry already
	default:
		return err.Error()
	}
}

// Options say what a walk chooses and how it opens directories.
type Options struct {
	// Name is the root's path in errors (default root.Name(), which for a
	// root opened through its descriptor is a /proc path).
	Name string
	// Prefix is put before each file's key (storage.KeyFor).
	Prefix string
	// Filter chooses files by their relative path.
	Filter *storage.Filter
	// OpenTimeout gives up opening a directory that hangs (0:
	// storage.DefaultOpenTimeout): the directory is skipped.
	OpenTimeout time.Duration
	Log         zerolog.Logger
}

// Walk reports every entry under root the filter chooses to v: each
// regular file once per inode (v.File; its other names v.Link, hard), each
// symbolic link that resolves inside root (v.Link, symbolic), and what it
// cannot stage (unreadable directories, special files, symbolic links
// leading out or to nothing, names the store cannot hold) to v.Skip with
// the reason: one bad entry must not cost the others. Only an unreadable
// root is an error.
//
// Each directory is opened relative to its parent's descriptor
// (storage.OpenDirAt: a directory only, no link followed, non-blocking,
// bounded in time) and its entries stat'ed relative to it, so a walk costs
// a few system calls per entry at any depth, and holds one descriptor per
// level of the directory it is in. Symbolic links are never followed:
// whether one resolves inside root is asked of root (os.Root: nothing
// outside it is ever reached). Entries come in directory order, not sorted.
func Walk(ctx context.Context, root *os.Root, o Options, v Visitor) error {
	w := &walker{root: root, o: o, v: v, inodes: map[inode]*inodeNames{}}
	name := o.Name
	if name == "" {
		name = root.Name()
	}
	top, err := storage.OpenFile(ctx, root, ".", os.O_RDONLY|syscall.O_DIRECTORY, o.OpenTimeout)
	if err == nil {
		var fr *frame
		fr, err = w.list(ctx, top, ".")
		if err == nil {
			w.stack = append(w.stack, fr)
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("walk %s: %w", strconv.Quote(name), cerr)
	}
	if err != nil {
		return storage.Unreadable("walk "+strconv.Quote(name), os.Geteuid(), os.Getegid(), err)
	}
	for len(w.stack) > 0 {
		fr := w.stack[len(w.stack)-1]
		if len(fr.subs) == 0 {
			fr.f.Close()
			w.stack = w.stack[:len(w.stack)-1]
			continue
		}
		sub := fr.subs[0]
		fr.subs = fr.subs[1:]
		p := join(fr.rel, sub)
		f, err := storage.OpenDirAt(ctx, fr.f, sub, p, o.OpenTimeout)
		var next *frame
		if err == nil {
			next, err = w.list(ctx, f, p)
		}
		if cerr := ctx.Err(); cerr != nil {
			w.closeAll()
			return fmt.Errorf("walk %s: %w", strconv.Quote(name), cerr)
		}
		if err != nil {
			// A directory that cannot be listed loses what it holds, but
			// only that; whether it held chosen files is not known.
			w.v.Skip(p, Reason(err))
			continue
		}
		w.stack = append(w.stack, next)
	}
	return nil
}

func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// frame is a directory being walked: open, listed, with the subdirectories
// still to walk.
type frame struct {
	f    *os.File
	rel  string
	subs []string
}

// inode names a file across its hard links.
type inode struct{ dev, ino uint64 }

// inodeNames is the first name the walk chose of a file with more than one
// link, and how many of its links it has not met yet: the entry is dropped
// once all are met, so memory holds only files whose links are still to
// come.
type inodeNames struct {
	rel  string
	left uint64
}

type walker struct {
	root   *os.Root
	o      Options
	v      Visitor
	stack  []*frame
	inodes map[inode]*inodeNames
}

func (w *walker) closeAll() {
	for _, fr := range w.stack {
		fr.f.Close()
	}
	w.stack = nil
}

// list visits the entries of the open directory f, at rel, and returns it
// as a frame with its subdirectories, or closes it on an error. A
// directory swapped for a FIFO after its parent was listed is refused at
// once (storage.OpenDirAt) instead of blocking the walk for good.
func (w *walker) list(ctx context.Context, f *os.File, rel string) (*frame, error) {
	fr := &frame{f: f, rel: rel}
	err := storage.ReadDirFile(ctx, f, func(d fs.DirEntry) error {
		if d.IsDir() {
			fr.subs = append(fr.subs, d.Name())
		} else {
			w.entry(f, join(rel, d.Name()), d)
		}
		return nil
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	return fr, nil
}

// entry visits one non-directory entry of the open directory dir.
func (w *walker) entry(dir *os.File, p string, d fs.DirEntry) {
	if !w.o.Filter.Match(p) {
		return
	}
	info, err := storage.LstatAt(dir, d.Name())
	if err != nil {
		w.v.Skip(p, Reason(err))
		return
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		w.symlink(dir, p, d.Name())
		return
	}
	if !info.Mode().IsRegular() {
		w.v.Skip(p, ReasonNotRegular)
		return
	}
	var id inode
	st, linked := info.Sys().(*unix.Stat_t)
	if linked = linked && st.Nlink > 1; linked {
		id = inode{uint64(st.Dev), st.Ino} //nolint:unconvert // Dev is uint32 on some platforms
		if first, ok := w.inodes[id]; ok {
			if _, err := storage.LinkPath(p); err != nil {
				w.v.Skip(p, err.Error())
				return
			}
			// Stored once: this name is a link to the first one.
			if first.left--; first.left == 0 {
				delete(w.inodes, id)
			}
			w.v.Link(Link{Rel: p, Target: first.rel, Kind: stagecontract.LinkHard})
			return
		}
	}
	key, encoded, err := storage.KeyFor(w.o.Prefix, p)
	if err != nil {
		w.v.Skip(p, err.Error()) // a later name of the file may be stored
		return
	}
	if linked {
		w.inodes[id] = &inodeNames{rel: p, left: uint64(st.Nlink) - 1} //nolint:unconvert // Nlink is uint32 on some platforms
	}
	w.v.File(File{Rel: p, Key: key, Encoded: encoded, Size: info.Size(), ModTime: info.ModTime()})
}

// symlink visits the symbolic link name in dir, at p: recorded when it
// resolves inside the root, else skipped with why. Its text is checked
// first (absolute, or up past the root, without looking further); then the
// root resolves it, following the links it leads through and refusing any
// step out of the root.
func (w *walker) symlink(dir *os.File, p, name string) {
	target, err := storage.ReadlinkAt(dir, name)
	if err != nil {
		w.v.Skip(p, Reason(err))
		return
	}
	if _, err := storage.LinkPath(p); err != nil {
		w.v.Skip(p, err.Error())
		return
	}
	err = storage.SymlinkInside(p, target, nil)
	switch {
	case errors.Is(err, storage.ErrLinkOut):
		w.v.Skip(p, ReasonLinkOut)
		return
	case err != nil:
		w.v.Skip(p, ReasonLinkText)
		return
	}
	_, err = w.root.Stat(p)
	switch {
	case err == nil:
		w.v.Link(Link{Rel: p, Target: target, Kind: stagecontract.LinkSymbolic})
	case errors.Is(err, fs.ErrNotExist):
		w.v.Skip(p, ReasonLinkDangling)
	case errors.Is(err, fs.ErrPermission):
		w.v.Skip(p, Reason(err)) // not missing: unreadable
	default:
		// os.Root refuses a path that escapes it, and the kernel a loop.
		w.v.Skip(p, ReasonLinkOut)
	}
}
