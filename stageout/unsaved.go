package stageout

import (
	"errors"
	"os"
	"strings"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout/walk"
	"github.com/kdefer/kdefer/storage"
)

// Reasons a file is listed as unsaved. They are for people (the manifest and
// the log), stable so that tests and runbooks can match them.
const (
	ReasonVanished   = walk.ReasonVanished
	ReasonNotRegular = walk.ReasonNotRegular
	ReasonChanged    = "changed while read"
)

// errChanged is a local read that ended before the size the file had when it
// was opened: the file shrank (or was replaced) while it was read.
var errChanged = errors.New(ReasonChanged)

// reasonFor turns a local error met opening or reading a file into the
// reason recorded for it (walk.Reason, and a file that shrank while read).
func reasonFor(err error) string {
	if errors.Is(err, errChanged) {
		return ReasonChanged
	}
	return walk.Reason(err)
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

// unreadable annotates err, met doing op on a local file, with op; a
// permission error also names the user stage-out runs as and the fix (the
// defer pod runs it as the Job's containers' user only when their
// securityContext says who that is).
func unreadable(op string, err error) error {
	return storage.Unreadable(op, os.Geteuid(), os.Getegid(), err)
}
