package stageout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// Reasons a file is listed as unsaved. They are for people (the manifest and
// the log), stable so that tests and runbooks can match them.
const (
	ReasonVanished   = "vanished after the walk"
	ReasonNotRegular = "not a regular file"
	ReasonChanged    = "changed while read"
)

// errChanged is a local read that ended before the size the file had when it
// was opened: the file shrank (or was replaced) while it was read.
var errChanged = errors.New(ReasonChanged)

// reasonFor turns a local error met opening or reading a file into the
// reason recorded for it. A permission error names the user stage-out runs
// as, which is what the fix depends on.
func reasonFor(err error) string {
	var pe *fs.PathError
	switch {
	case errors.Is(err, errChanged):
		return ReasonChanged
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

// unsavedFile is the manifest entry for rel.
func unsavedFile(rel, reason string) stagecontract.UnsavedFile {
	return stagecontract.UnsavedFile{Path: storage.ManifestPath(rel), Reason: reason}
}

// unsaved records that rel will not be stored, and why. The log line carries
// the fix for a permission problem, which the manifest has no room for.
func (e *engine) unsaved(rel, reason string) {
	ev := e.o.Log.Warn().Str("path", storage.ManifestPath(rel)).Str("reason", reason)
	if strings.HasPrefix(reason, "permission denied") {
		ev = ev.Str("fix", storage.UnreadableFix)
	}
	ev.Msg("skip unsaved file")
	e.mu.Lock()
	e.unsavedFiles = append(e.unsavedFiles, unsavedFile(rel, reason))
	e.mu.Unlock()
}
