package stagein

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"strconv"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// link is a manifest link to restore: at rel, of kind, to target (a hard
// link: the local name of the file it shares; a symbolic link: its text).
type link struct {
	rel, target, kind string
}

// chooseLinks keeps the links of m the filter selects, as local names. A
// hard link whose file the filter leaves out is downloaded as a file of its
// own (returned as an entry): its content is that file's.
func chooseLinks(m *stagecontract.Manifest, filter *storage.Filter, prefix string, chosen []entry) ([]link, []entry) {
	if len(m.Links) == 0 {
		return nil, nil
	}
	have := make(map[string]bool, len(chosen))
	for _, en := range chosen {
		have[en.rel] = true
	}
	files := make(map[string]stagecontract.ManifestFile, len(m.Files))
	for _, f := range m.Files {
		files[f.Key] = f
	}
	var links []link
	var extra []entry
	for _, ml := range m.Links {
		rel := storage.LinkNameOf(ml)
		if !filter.Match(rel) {
			continue
		}
		if ml.Kind == stagecontract.LinkSymbolic {
			links = append(links, link{rel: rel, target: ml.Target, kind: ml.Kind})
			continue
		}
		f := files[ml.Target] // ParseManifest checked it is there
		if target := storage.NameOf(f); have[target] {
			links = append(links, link{rel: rel, target: target, kind: ml.Kind})
			continue
		}
		extra = append(extra, fileEntry(prefix, f, rel))
	}
	return links, extra
}

// links restores the links, once every file is in place: each made under
// the temporary name and renamed over rel, as files are. A hard link that
// link(2) refuses (the file system has none, a quota) is made a copy of
// its file, with a line in the log. A symbolic link is checked where it
// stands: ParseManifest refused a manifest whose links lead out of the
// tree, but the destination may hold a link of its own one leads through;
// one that then resolves out of the destination is removed, and the run
// fails naming it.
func (d *downloader) links(ctx context.Context, links []link) error {
	for _, l := range links {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.o.DryRun {
			d.o.Log.Info().Str("path", storage.ManifestPath(l.rel)).Str("kind", l.kind).Str("target", storage.ManifestPath(l.target)).Msg("would link")
			continue
		}
		if err := d.link(ctx, l); err != nil {
			return err
		}
	}
	// Checked once all are made: one may lead through another.
	for _, l := range links {
		if l.kind != stagecontract.LinkSymbolic || d.o.DryRun {
			continue
		}
		// os.Root refuses to resolve a path out of the destination.
		if _, err := d.root.Stat(l.rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			_ = d.root.Remove(l.rel)
			return storage.Permanentf("remove the link in the destination it leads through, or the link from the manifest",
				"refuse symbolic link %q (to %q): it resolves out of the destination: %w", l.rel, l.target, err)
		}
	}
	return nil
}

func (d *downloader) link(ctx context.Context, l link) error {
	if d.linked(l) {
		return nil
	}
	if dir := path.Dir(l.rel); dir != "." {
		if err := d.root.MkdirAll(dir, 0o755); err != nil {
			return storage.Permanentf("remove what blocks the directory, or the symlink leaving the destination", "create directory for %q: %w", l.rel, err)
		}
	}
	tmp := l.rel + TempSuffix
	if err := d.root.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return storage.WithOp("remove "+strconv.Quote(tmp), err)
	}
	var err error
	if l.kind == stagecontract.LinkSymbolic {
		err = d.root.Symlink(l.target, tmp)
	} else if err = d.root.Link(l.target, tmp); err != nil {
		d.o.Log.Warn().Str("path", storage.ManifestPath(l.rel)).Str("target", storage.ManifestPath(l.target)).Str("error", err.Error()).Msg("copy hard link: link(2) failed")
		err = d.copy(ctx, l.target, tmp)
	}
	if err == nil {
		err = d.root.Rename(tmp, l.rel)
	}
	if err != nil {
		_ = d.root.Remove(tmp)
		return storage.WithOp("link "+strconv.Quote(l.rel), err)
	}
	return nil
}

// linked reports whether l is in place already: a symbolic link with its
// text, or another name of its file.
func (d *downloader) linked(l link) bool {
	if l.kind == stagecontract.LinkSymbolic {
		t, err := d.root.Readlink(l.rel)
		return err == nil && t == l.target
	}
	a, err := d.root.Lstat(l.rel)
	if err != nil {
		return false
	}
	b, err := d.root.Lstat(l.target)
	return err == nil && os.SameFile(a, b)
}

// copy copies the file at from, in the destination, to a new file at to.
func (d *downloader) copy(ctx context.Context, from, to string) error {
	src, ok := storage.OpenRegular(ctx, d.root, from, d.o.OpenTimeout)
	if !ok {
		return storage.Permanentf("", "copy %q: not a regular file", from)
	}
	defer src.Close()
	dst, err := d.root.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := storage.CopyBuffer(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
