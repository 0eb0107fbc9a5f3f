package stageout

import (
	"errors"
	"io/fs"
	"os"
	"sort"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// walk lists the regular files under root, and the files it chose but
// cannot stage (unreadable directories, special files, names the store
// cannot hold) with the reason: one bad entry must not cost the others.
// Symlinks are followed only to regular files inside root (os.Root refuses
// escapes); symlinked directories are not followed (no loops, no escapes).
// Only an unreadable root is an error.
func walk(root *os.Root, prefix string, filter *Filter, log zerolog.Logger) ([]file, []stagecontract.UnsavedFile, error) {
	var files []file
	var unsaved []stagecontract.UnsavedFile
	skip := func(p, reason string) {
		log.Warn().Str("path", manifestPath(p)).Str("reason", reason).Msg("skip unsaved file")
		unsaved = append(unsaved, unsavedFile(p, reason))
	}
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return unreadable("walk "+strconv.Quote(p), err)
			}
			// A directory that cannot be listed loses what it holds, but
			// only that; whether it held chosen files is not known.
			skip(p, reasonFor(err))
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if p == "." || d.IsDir() {
			return nil
		}
		if !filter.Match(p) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			skip(p, reasonFor(err))
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := root.Stat(p)
			if errors.Is(err, fs.ErrPermission) {
				skip(p, reasonFor(err)) // not missing: unreadable
				return nil
			}
			if err != nil {
				log.Warn().Str("path", manifestPath(p)).Str("reason", "symlink target is outside the directory or missing").Msg("skip symlink")
				return nil
			}
			if !target.Mode().IsRegular() {
				log.Warn().Str("path", manifestPath(p)).Str("reason", "symlink to a non-regular file or directory is not followed").Msg("skip symlink")
				return nil
			}
			info = target
		} else if !info.Mode().IsRegular() {
			skip(p, ReasonNotRegular)
			return nil
		}
		key, err := storage.KeyFor(prefix, p)
		if err != nil {
			skip(p, err.Error())
			return nil
		}
		files = append(files, file{rel: p, key: key, size: info.Size(), mtime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	return files, unsaved, nil
}

// unreadable annotates err, met doing op on a local file, with op; a
// permission error also names the user stage-out runs as and the fix (the
// defer pod runs it as the Job's containers' user only when their
// securityContext says who that is).
func unreadable(op string, err error) error {
	return storage.Unreadable(op, os.Geteuid(), os.Getegid(), err)
}
