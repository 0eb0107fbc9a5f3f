package stagein

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// hasManifest reports whether the prefix's manifest exists: a prefix that
// holds one is staged in from it (the committed outputs), with one request
// instead of a listing of every object.
func hasManifest(ctx context.Context, be storage.Backend, mkey string, retry storage.RetryPolicy) (bool, error) {
	found := false
	err := retry.Do(ctx, func(ctx context.Context) error {
		_, err := be.Stat(ctx, mkey)
		found = err == nil
		if errors.Is(err, storage.ErrNotExist) {
			return nil
		}
		return err
	})
	return found, storage.WithOp("stat "+stagecontract.ManifestKey, err)
}

// list returns the objects under the prefix but kdefer's own, the first of
// kdefer's it saw ("" for none) and whether one of them is the manifest (a
// stage-out that committed since hasManifest looked).
func list(ctx context.Context, be storage.Backend, loc storage.Location, retry storage.RetryPolicy) (entries []entry, reserved string, committed bool, err error) {
	mkey := loc.Prefix + stagecontract.ManifestKey
	err = retry.Do(ctx, func(ctx context.Context) error {
		entries, reserved, committed = entries[:0], "", false
		return be.List(ctx, loc.Prefix, func(oi storage.ObjectInfo) error {
			if strings.HasPrefix(oi.Key, loc.Prefix+stagecontract.ReservedDir) {
				if reserved == "" {
					reserved = oi.Key
				}
				committed = committed || oi.Key == mkey
				return nil // kdefer's own objects
			}
			if oi.Refused != nil {
				return oi.Refused
			}
			rel, err := storage.RelFor(loc.Prefix, oi.Key)
			if err != nil {
				return err
			}
			entries = append(entries, entry{key: oi.Key, rel: rel, size: oi.Size})
			return nil
		})
	})
	if err != nil {
		return nil, "", false, storage.WithOp("list "+loc.String(), err)
	}
	return entries, reserved, committed, nil
}

// committerOf is the summary's account of who committed a manifest.
func committerOf(m *stagecontract.Manifest) *stagecontract.Committer {
	return &stagecontract.Committer{Pod: m.Identity["pod"], UID: m.Identity["uid"], Trigger: m.Trigger}
}

// manifestRef is the manifest a stage-in's entries come from, as it was
// read: enough to tell, when an object differs from it, whether it is still
// the prefix's manifest.
type manifestRef struct {
	key        string
	start, end time.Time

	once    sync.Once
	current bool  // still the prefix's manifest
	err     error // reading it again failed
}

// errDiffers marks a stored object that is not what the manifest records
// (another checksum, or another size than the store says it has).
var errDiffers = errors.New("not what the manifest records")

// uncommittedFix is the fix of an object that differs from the manifest
// that still commits it.
const uncommittedFix = "restore the object, or rerun the stage-out that wrote the prefix"

// judge returns err, verify's verdict on an entry of the manifest, as what
// it is. An object that differs from a manifest that is still the prefix's
// is corrupt: a stage-out rerun that has to change an object removes the
// manifest first, so no retry will mend it, and the error is permanent.
// When the manifest is gone or another, a rerun of the stage-out is
// replacing the prefix: the error stays transient, and the next stage-in
// reads the new manifest.
func (d *downloader) judge(ctx context.Context, err error) error {
	if err == nil || d.manifest == nil || !errors.Is(err, errDiffers) {
		return err
	}
	m := d.manifest
	m.once.Do(func() {
		now, rerr := storage.ReadManifest(ctx, d.be, m.key, d.o.Retry)
		switch {
		case errors.Is(rerr, storage.ErrNotExist):
		case rerr != nil:
			m.err = rerr
		default:
			m.current = now.Start.Equal(m.start) && now.End.Equal(m.end)
		}
	})
	switch {
	case m.err != nil:
		return fmt.Errorf("%w; read the manifest again: %w", err, m.err)
	case m.current:
		return &storage.Error{Class: storage.Permanent, Fix: uncommittedFix, Err: err}
	}
	return &storage.Error{Class: storage.Transient, Err: fmt.Errorf("%w; the manifest changed since it was read (a rerun of the stage-out is replacing the prefix)", err)}
}
