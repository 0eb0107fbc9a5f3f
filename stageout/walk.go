package stageout

import (
	"errors"
	"io/fs"
	"os"
	"sort"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/storage"
)

// walk lists the regular files under root. Symlinks are followed only to
// regular files inside root (os.Root refuses escapes); symlinked
// directories are not followed (no loops, no escapes); special files are
// skipped with a warning.
func walk(root *os.Root, prefix string, filter *Filter, log zerolog.Logger) ([]file, error) {
	var files []file
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return unreadable("walk "+strconv.Quote(p), err)
		}
		if p == "." {
			return nil
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return unreadable("stat "+strconv.Quote(p), err)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := root.Stat(p)
			if errors.Is(err, fs.ErrPermission) {
				return unreadable("stat "+strconv.Quote(p), err) // not missing: unreadable
			}
			if err != nil {
				log.Warn().Str("path", p).Str("reason", "symlink target is outside the directory or missing").Msg("skip symlink")
				return nil
			}
			if !target.Mode().IsRegular() {
				log.Warn().Str("path", p).Str("reason", "symlink to a non-regular file or directory is not followed").Msg("skip symlink")
				return nil
			}
			info = target
		} else if !info.Mode().IsRegular() {
			log.Warn().Str("path", p).Str("mode", info.Mode().Type().String()).Msg("skip special file")
			return nil
		}
		if !filter.Match(p) {
			return nil
		}
		key, err := storage.KeyFor(prefix, p)
		if err != nil {
			return err
		}
		files = append(files, file{rel: p, key: key, size: info.Size(), mtime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	return files, nil
}

// unreadable annotates err, met doing op on a local file, with op; a
// permission error also names the user stage-out runs as and the fix (the
// defer pod runs it as the Job's containers' user only when their
// securityContext says who that is).
func unreadable(op string, err error) error {
	return storage.Unreadable(op, os.Geteuid(), os.Getegid(), err)
}
