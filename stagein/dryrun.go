package stagein

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strconv"

	"github.com/kdefer/kdefer/storage"
)

// choose keeps the entries the filter selects. A filter that leaves nothing
// of a non-empty source is the same mistake as an empty prefix (a glob that
// matches nothing, as `**/*.{root,log}` did before braces were supported)
// and fails the same way unless allowEmpty.
func choose(entries []entry, filter *storage.Filter, allowEmpty bool, loc storage.Location) ([]entry, error) {
	if filter.Empty() {
		return entries, nil
	}
	n := len(entries)
	entries = slices.DeleteFunc(entries, func(en entry) bool { return !filter.Match(en.rel) })
	if len(entries) == 0 && n > 0 && !allowEmpty {
		return nil, storage.Permanentf("fix the --include/--exclude globs, or pass --allow-empty",
			"none of the %d objects under %s matches the include/exclude globs", n, loc.String())
	}
	return entries, nil
}

// openDestination opens the destination directory, making what is missing,
// beneath the work volume's root: the directories down to it may be what
// another init container or a volume's dataSource left, and none is
// followed if it is a link or opened if it is a FIFO
// (storage.OpenDirBeneath). A dry run makes nothing and opens the
// directory only if it exists (to tell which files are present already),
// else returns nil.
func openDestination(ctx context.Context, o Options) (*os.Root, error) {
	root, err := storage.OpenDirBeneath(ctx, o.VolumeRoot, o.To, !o.DryRun, o.OpenTimeout)
	if o.DryRun && errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, storage.WithOp("open destination directory "+strconv.Quote(o.To), err)
	}
	return root, nil
}

// dryRun logs whether en would be downloaded or skipped, and counts it as
// such; it only reads (the local file, to compare it, and the object's
// attributes).
func (d *downloader) dryRun(ctx context.Context, en *entry) error {
	skip := false
	if d.root != nil {
		var err error
		if skip, err = d.present(ctx, en); err != nil {
			return err
		}
	}
	path := storage.ManifestPath(en.rel)
	if skip {
		d.o.Log.Info().Str("path", path).Int64("bytes", en.size).Msg("would skip (present)")
		d.done(en, false)
		return nil
	}
	d.o.Log.Info().Str("path", path).Str("key", en.key).Int64("bytes", en.size).Msg("would download")
	d.prog.Moved.Add(en.size)
	d.prog.BytesDone.Add(en.size)
	d.done(en, true)
	return nil
}
