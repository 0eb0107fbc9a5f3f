package stageout

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/storage"
)

// walkBatch is how many directory entries are read at once: a directory of
// a million files is listed in bounded memory.
const walkBatch = 1024

// walk calls emit for every regular file under root the filter chooses, and
// skip for what it chose but cannot stage (unreadable directories, special
// files, names the store cannot hold) with the reason: one bad entry must
// not cost the others. Only an unreadable root is an error.
//
// It reads directories through root (os.Root: nothing outside it is ever
// reached) and not through root.FS(), whose io/fs paths must be valid UTF-8:
// a directory with any other name would be lost. Symlinks are followed only
// to regular files inside root; symlinked directories are not followed (no
// loops, no escapes). Entries come in directory order, not sorted: sorting
// would hold a whole directory in memory.
func walk(root *os.Root, prefix string, filter *storage.Filter, log zerolog.Logger, emit func(file), skip func(rel, reason string)) error {
	w := &walker{root: root, prefix: prefix, filter: filter, log: log, emit: emit, skip: skip}
	dirs := []string{"."}
	for len(dirs) > 0 {
		dir := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		sub, err := w.dir(dir)
		if err != nil && dir == "." {
			return unreadable("walk "+strconv.Quote(root.Name()), err)
		}
		if err != nil {
			// A directory that cannot be listed loses what it holds, but
			// only that; whether it held chosen files is not known.
			skip(dir, reasonFor(err))
		}
		for k := len(sub) - 1; k >= 0; k-- { // first subdirectory first
			dirs = append(dirs, sub[k])
		}
	}
	return nil
}

type walker struct {
	root   *os.Root
	prefix string
	filter *storage.Filter
	log    zerolog.Logger
	emit   func(file)
	skip   func(rel, reason string)
}

// dir visits the entries of dir and returns its subdirectories.
func (w *walker) dir(dir string) ([]string, error) {
	f, err := w.root.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var sub []string
	for {
		ents, err := f.ReadDir(walkBatch)
		for _, d := range ents {
			p := d.Name()
			if dir != "." {
				p = dir + "/" + p
			}
			if d.IsDir() {
				sub = append(sub, p)
				continue
			}
			w.entry(p, d)
		}
		if errors.Is(err, io.EOF) || (err == nil && len(ents) == 0) {
			return sub, nil
		}
		if err != nil {
			return sub, err
		}
	}
}

// entry visits one non-directory entry.
func (w *walker) entry(p string, d fs.DirEntry) {
	if !w.filter.Match(p) {
		return
	}
	info, err := d.Info()
	if err != nil {
		w.skip(p, reasonFor(err))
		return
	}
	if d.Type()&fs.ModeSymlink != 0 {
		target, err := w.root.Stat(p)
		if errors.Is(err, fs.ErrPermission) {
			w.skip(p, reasonFor(err)) // not missing: unreadable
			return
		}
		if err != nil {
			w.log.Warn().Str("path", storage.ManifestPath(p)).Str("reason", "symlink target is outside the directory or missing").Msg("skip symlink")
			return
		}
		if !target.Mode().IsRegular() {
			w.log.Warn().Str("path", storage.ManifestPath(p)).Str("reason", "symlink to a non-regular file or directory is not followed").Msg("skip symlink")
			return
		}
		info = target
	} else if !info.Mode().IsRegular() {
		w.skip(p, ReasonNotRegular)
		return
	}
	key, encoded, err := storage.KeyFor(w.prefix, p)
	if err != nil {
		w.skip(p, err.Error())
		return
	}
	w.emit(file{rel: p, key: key, encoded: encoded, size: info.Size(), mtime: info.ModTime()})
}

// unreadable annotates err, met doing op on a local file, with op; a
// permission error also names the user stage-out runs as and the fix (the
// defer pod runs it as the Job's containers' user only when their
// securityContext says who that is).
func unreadable(op string, err error) error {
	return storage.Unreadable(op, os.Geteuid(), os.Getegid(), err)
}
