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
	"time"

	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/storage"
)

// Reasons a file is listed as unsaved. They are for people (the manifest and
// the log), stable so that tests and runbooks can match them.
const (
	ReasonVanished   = "vanished after the walk"
	ReasonNotRegular = "not a regular file"
)

// File is a file the walk chose: its path relative to the root, its object
// key, and what Lstat (or, for a link, Stat) said of it.
type File struct {
	Rel, Key string
	Encoded  bool // Key is not Rel (storage.EncodeName)
	Size     int64
	ModTime  time.Time
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

// Walk calls emit for every regular file under root the filter chooses, and
// skip for what it chose but cannot stage (unreadable directories, special
// files, names the store cannot hold) with the reason: one bad entry must
// not cost the others. Only an unreadable root is an error.
//
// It reads directories through root (os.Root: nothing outside it is ever
// reached) with storage.ReadDir: any name, directories opened as
// directories only, non-blocking and bounded in time. Symlinks are followed
// only to regular files inside root; symlinked directories are not followed
// (no loops, no escapes). Entries come in directory order, not sorted.
func Walk(ctx context.Context, root *os.Root, o Options, emit func(File), skip func(rel, reason string)) error {
	w := &walker{root: root, o: o, emit: emit, skip: skip}
	name := o.Name
	if name == "" {
		name = root.Name()
	}
	dirs := []string{"."}
	for len(dirs) > 0 {
		dir := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		sub, err := w.dir(ctx, dir)
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("walk %s: %w", strconv.Quote(name), cerr)
		}
		if err != nil && dir == "." {
			return storage.Unreadable("walk "+strconv.Quote(name), os.Geteuid(), os.Getegid(), err)
		}
		if err != nil {
			// A directory that cannot be listed loses what it holds, but
			// only that; whether it held chosen files is not known.
			skip(dir, Reason(err))
		}
		for k := len(sub) - 1; k >= 0; k-- { // first subdirectory first
			dirs = append(dirs, sub[k])
		}
	}
	return nil
}

type walker struct {
	root *os.Root
	o    Options
	emit func(File)
	skip func(rel, reason string)
}

// dir visits the entries of dir and returns its subdirectories. A
// directory swapped for a FIFO after its parent was listed is refused at
// once (storage.ReadDir) instead of blocking the walk for good.
func (w *walker) dir(ctx context.Context, dir string) ([]string, error) {
	var sub []string
	err := storage.ReadDir(ctx, w.root, dir, w.o.OpenTimeout, func(d fs.DirEntry) error {
		p := d.Name()
		if dir != "." {
			p = dir + "/" + p
		}
		if d.IsDir() {
			sub = append(sub, p)
		} else {
			w.entry(p, d)
		}
		return nil
	})
	return sub, err
}

// entry visits one non-directory entry.
func (w *walker) entry(p string, d fs.DirEntry) {
	if !w.o.Filter.Match(p) {
		return
	}
	info, err := d.Info()
	if err != nil {
		w.skip(p, Reason(err))
		return
	}
	if d.Type()&fs.ModeSymlink != 0 {
		target, err := w.root.Stat(p)
		if errors.Is(err, fs.ErrPermission) {
			w.skip(p, Reason(err)) // not missing: unreadable
			return
		}
		if err != nil {
			w.o.Log.Warn().Str("path", storage.ManifestPath(p)).Str("reason", "symlink target is outside the directory or missing").Msg("skip symlink")
			return
		}
		if !target.Mode().IsRegular() {
			w.o.Log.Warn().Str("path", storage.ManifestPath(p)).Str("reason", "symlink to a non-regular file or directory is not followed").Msg("skip symlink")
			return
		}
		info = target
	} else if !info.Mode().IsRegular() {
		w.skip(p, ReasonNotRegular)
		return
	}
	key, encoded, err := storage.KeyFor(w.o.Prefix, p)
	if err != nil {
		w.skip(p, err.Error())
		return
	}
	w.emit(File{Rel: p, Key: key, Encoded: encoded, Size: info.Size(), ModTime: info.ModTime()})
}
