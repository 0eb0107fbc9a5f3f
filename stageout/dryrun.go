package stageout

import (
	"errors"
	"io/fs"
	"os"
	"strings"

	"github.com/kdefer/kdefer/storage"
)

// noFiles reports a walk that chose no file: almost always a wrong --from or
// a glob that matches nothing (as `**/*.{root,log}` did before braces were
// supported). It is a warning, and the empty manifest is still written,
// unless RequireFiles makes it an error.
func (e *engine) noFiles() error {
	if e.prog.FilesTotal.Load() > 0 || len(e.unsavedFiles) > 0 {
		return nil
	}
	what := "no file under " + e.o.From
	if len(e.o.Include) > 0 || len(e.o.Exclude) > 0 {
		what += " matches include [" + strings.Join(e.o.Include, " ") + "] exclude [" + strings.Join(e.o.Exclude, " ") + "]"
	}
	if e.o.RequireFiles {
		return storage.Permanentf("fix --from or the include/exclude globs (the policy requires files)", "nothing to upload: %s", what)
	}
	e.o.Log.Warn().Str("from", e.o.From).Strs("include", e.o.Include).Strs("exclude", e.o.Exclude).
		Msg("upload nothing: " + what)
	return nil
}

// missingFileDir reports a dry run to a file:// directory that does not
// exist: nothing is stored there yet, and opening it would create it.
func missingFileDir(dryRun bool, loc storage.Location) bool {
	if !dryRun || loc.Scheme != "file" {
		return false
	}
	_, err := os.Stat(loc.Bucket)
	return errors.Is(err, fs.ErrNotExist)
}

// wouldSkip logs, in a dry run, that f is stored already.
func (e *engine) wouldSkip(f *file, skip bool) {
	if e.o.DryRun && skip {
		e.o.Log.Info().Str("path", storage.ManifestPath(f.rel)).Int64("bytes", f.size).Msg("would skip (stored)")
	}
}

// wouldUpload logs, in a dry run, that f would be uploaded, and counts it as
// moved. It does not read the file: a dry run costs a walk, a listing and
// the checksums of same-size objects, not a read of everything.
func (e *engine) wouldUpload(f *file) {
	e.o.Log.Info().Str("path", storage.ManifestPath(f.rel)).Str("key", f.key).Int64("bytes", f.size).Msg("would upload")
	e.prog.Moved.Add(f.size)
	e.prog.BytesDone.Add(f.size)
}
