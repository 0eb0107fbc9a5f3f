package stageout

import (
	"encoding/json"
	"fmt"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout/walk"
	"github.com/kdefer/kdefer/storage"
)

// ReasonLinkUnsaved is the reason a hard link is unsaved: the file it
// shares its content with, stored under another name, was not stored.
const ReasonLinkUnsaved = "hard link to a file that was not saved"

// link records a name the walk chose as a link (walk.Link). Links go to a
// temporary file as the manifest entries do: a tree may hold a million. A
// hard link's target is remembered until the manifest is written, to tell
// whether it was stored: one entry per file with several names.
func (e *engine) link(l walk.Link) {
	ml := stagecontract.ManifestLink{Kind: l.Kind, Target: l.Target}
	var err error
	if ml.Path, err = storage.LinkPath(l.Rel); err == nil && l.Kind == stagecontract.LinkHard {
		ml.Target, err = storage.LinkPath(l.Target) // the target's key
	}
	if err != nil { // the walk checked both names
		e.unsaved(l.Rel, err.Error())
		return
	}
	rec, err := json.Marshal(ml)
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.Kind == stagecontract.LinkHard {
		e.hardTargets[l.Target] = false
	}
	if err == nil {
		err = e.links.add(rec)
	}
	if err != nil && e.resultsErr == nil {
		e.resultsErr = err
	}
}

// storedTarget notes that the file at rel, which a hard link may name, is
// stored; the caller holds e.mu.
func (e *engine) storedTarget(rel string) {
	if _, ok := e.hardTargets[rel]; ok {
		e.hardTargets[rel] = true
	}
}

// keptLinks returns the links to record in the manifest: all but the hard
// links whose file was not stored, which are unsaved instead (a link to
// nothing would restore nothing).
func (e *engine) keptLinks() (*spill, error) {
	kept := newSpill(func(error) {})
	err := e.links.each(func(rec []byte) error {
		var l stagecontract.ManifestLink
		if err := json.Unmarshal(rec, &l); err != nil {
			return fmt.Errorf("read back the temporary file: %w", err)
		}
		if l.Kind == stagecontract.LinkHard {
			target, _ := storage.LinkName(l.Target)
			if !e.hardTargets[target] {
				e.unsaved(storage.LinkNameOf(l), ReasonLinkUnsaved)
				return nil
			}
		}
		return kept.add(rec)
	})
	if err != nil {
		kept.close()
		return nil, err
	}
	return kept, nil
}

// linkEntries reads the kept links back (the comparison with an earlier
// manifest).
func linkEntries(links *spill) ([]stagecontract.ManifestLink, error) {
	var out []stagecontract.ManifestLink
	err := links.each(func(rec []byte) error {
		var l stagecontract.ManifestLink
		if err := json.Unmarshal(rec, &l); err != nil {
			return fmt.Errorf("read back the temporary file: %w", err)
		}
		out = append(out, l)
		return nil
	})
	return out, err
}
