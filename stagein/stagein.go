// Package stagein downloads a prefix, or exactly the files of a manifest,
// into a directory: in parallel, large objects in parallel ranges, each file
// written to a temporary name and renamed into place once complete and
// verified, files already present with the right content skipped, and no
// byte ever written outside the directory.
//
// It owns the download side of the stage contract. It must not write to or
// delete from the store (stage-in only reads), must not write outside the
// destination directory, and must not import stageout: what both engines
// share lives in storage.
package stagein

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// Options configure a stage-in.
type Options struct {
	// From is a prefix URL or a manifest URL (".../_kdefer/manifest.json");
	// To is the local directory (created if missing).
	From, To string
	// VolumeRoot is the work volume's mount point To lies in: every
	// directory from it down to To is resolved, or made, without following
	// a link (storage.OpenDirBeneath). "" trusts To's whole path.
	VolumeRoot string
	// AllowEmpty accepts a prefix with no objects (else a permanent error:
	// missing inputs are almost always a wrong URL).
	AllowEmpty bool
	// AllowUncommitted stages in a prefix that holds kdefer's own objects
	// (stagecontract.ReservedDir) but no manifest, every object but those,
	// as a prefix without any is. Without it such a prefix, whose
	// stage-out never committed (it was stopped, failed or still runs),
	// is refused.
	AllowUncommitted bool
	// TransferOptions are shared with stage-out; Backend, when set, is
	// used instead of opening From.
	storage.TransferOptions
}

// Result is what a stage-in did.
type Result struct {
	storage.TransferResult
}

// TempSuffix marks files being downloaded. The name is deterministic so a
// rerun after a crash replaces it instead of leaving garbage.
const TempSuffix = ".kdefer-tmp"

// rangeThreshold and rangeSize: objects above the threshold are fetched in
// parallel ranges written with WriteAt straight into the file (no buffers).
const (
	rangeThreshold = 64 << 20
	rangeSize      = 16 << 20
)

type entry struct {
	key, rel string
	size     int64
	crc      uint32
	hasCRC   bool         // crc is known in advance (manifest)
	extra    storage.Sums // the manifest's optional checksums
}

// Run performs the stage-in.
func Run(ctx context.Context, o Options) (Result, error) {
	o.TransferOptions = o.TransferOptions.WithDefaults()
	prefixURL, isManifest := storage.SplitManifestURL(o.From)
	loc, err := storage.ParseURL(prefixURL)
	if err != nil {
		return Result{}, err
	}
	filter, err := storage.NewFilter(o.Include, o.Exclude)
	if err != nil {
		return Result{}, storage.Usagef("%w", err)
	}
	be := o.Backend
	if be == nil {
		be, err = storage.Open(ctx, loc, o.TransferOptions.OpenOptions(false))
		if err != nil {
			return Result{}, err
		}
		defer be.Close()
	}

	// Collect and check every key before writing anything: one hostile key
	// refuses the whole run, so nothing partial is left to trust. A prefix
	// that holds a manifest is staged in from it, as its URL would be: the
	// committed outputs, never a leftover beside them.
	var entries []entry
	var man *stagecontract.Manifest
	res := Result{}
	mkey := loc.Prefix + stagecontract.ManifestKey
	if !isManifest {
		if isManifest, err = hasManifest(ctx, be, mkey, o.Retry); err != nil {
			return Result{}, err
		}
	}
	if !isManifest {
		var reserved string
		entries, reserved, isManifest, err = list(ctx, be, loc, o.Retry)
		if err != nil {
			return Result{}, err
		}
		switch {
		case isManifest:
			entries = nil // committed since hasManifest looked
		case reserved != "" && !o.AllowUncommitted:
			return Result{}, storage.Permanentf("stage in once the stage-out that writes the prefix has completed, or pass --allow-uncommitted (the DeferPolicy's stageIn[].allowUncommitted) to take its objects as they are",
				"%s holds kdefer's objects (%s) but no manifest (%s): the stage-out that wrote it never committed it (it was stopped, failed, or is still running)",
				loc.String(), strconv.Quote(strings.TrimPrefix(reserved, loc.Prefix)), stagecontract.ManifestKey)
		case reserved != "":
			o.Log.Warn().Str("from", loc.String()).Str("reserved", strings.TrimPrefix(reserved, loc.Prefix)).
				Msg("stage in an uncommitted prefix (--allow-uncommitted): no manifest, kdefer's objects left out")
		}
	}
	if !isManifest && len(entries) == 0 && !o.AllowEmpty {
		return Result{}, storage.Permanentf("fix the URL, or pass --allow-empty", "no objects under %s", loc.String())
	}
	var mref *manifestRef
	if isManifest {
		m, err := storage.ReadManifest(ctx, be, mkey, o.Retry)
		if err != nil {
			return Result{}, err
		}
		res.ManifestURL = loc.KeyURL(mkey)
		man = m
		res.Committer = committerOf(m)
		mref = &manifestRef{key: mkey, start: m.Start, end: m.End}
		entries = make([]entry, 0, len(m.Files))
		for _, f := range m.Files {
			// A name the store could not hold is restored as it was
			// (ParseManifest checked that it stays inside the tree).
			entries = append(entries, fileEntry(loc.Prefix, f, storage.NameOf(f)))
		}
		ev := o.Log.Info().Str("manifest", res.ManifestURL)
		if len(m.Identity) > 0 {
			ev = ev.Interface("identity", m.Identity)
		}
		if m.Trigger != "" {
			ev = ev.Str("trigger", m.Trigger)
		}
		if m.ExitCode != "" {
			ev = ev.Str("exitCode", m.ExitCode)
		}
		ev.Time("committed", m.End).Str("tool", m.Tool).Int("files", len(m.Files)).Msg("stage in committed outputs")
	}
	if entries, err = choose(entries, filter, o.AllowEmpty, loc); err != nil {
		return Result{}, err
	}
	var links []link
	if man != nil {
		var copies []entry
		links, copies = chooseLinks(man, filter, loc.Prefix, entries)
		entries = append(entries, copies...)
	}
	rels := make([]string, 0, len(entries)+len(links))
	for i := range entries {
		rels = append(rels, entries[i].rel)
	}
	for _, l := range links {
		rels = append(rels, l.rel)
	}
	if err := storage.CheckTree(rels, TempSuffix); err != nil {
		return Result{}, err
	}

	root, err := openDestination(ctx, o)
	if err != nil {
		return Result{}, err
	}
	if root != nil {
		defer root.Close()
	}

	prog := storage.NewProgress(o.Clock)
	for _, en := range entries {
		prog.FilesTotal.Add(1)
		prog.BytesTotal.Add(en.size)
	}
	o.Log.Info().Str("from", loc.String()).Bool("manifest", isManifest).Str("to", o.To).Bool("dryRun", o.DryRun).
		Int64("files", prog.FilesTotal.Load()).Int64("bytes", prog.BytesTotal.Load()).Int("concurrency", o.Concurrency).Msg("start stage-in")
	pctx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	go o.ReportProgress(pctx, prog)

	d := &downloader{o: o, be: be, root: root, prog: prog, manifest: mref}
	pool := storage.NewPool(ctx, o.Concurrency)
	err = pool.Each(len(entries), func(ctx context.Context, i int) error { return d.file(ctx, pool, &entries[i]) })
	if err != nil {
		return Result{}, err
	}
	if err := d.links(ctx, links); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("stop stage-in: %w", err)
	}
	res.Bytes, res.Objects, res.Skipped, res.TotalBytes = prog.Moved.Load(), prog.Objects.Load(), prog.Skipped.Load(), prog.BytesTotal.Load()
	prog.Log(o.Log, "report final progress")
	return res, nil
}

// fileEntry is the entry of the manifest file f, restored at rel.
func fileEntry(prefix string, f stagecontract.ManifestFile, rel string) entry {
	crc, _ := storage.ParseChecksum(f.Checksum) // validated by ParseManifest
	extra, _ := storage.ParseExtra(f.Checksums)
	return entry{key: prefix + f.Key, rel: rel, size: f.Size, crc: crc, hasCRC: true, extra: extra}
}

type downloader struct {
	o    Options
	be   storage.Backend
	root *os.Root
	prog *storage.Progress
	dirs sync.Map // directories created
	// manifest is the manifest the entries come from, nil in prefix mode.
	manifest *manifestRef
}

func (d *downloader) done(en *entry, moved bool) {
	d.prog.FilesDone.Add(1)
	if moved {
		d.prog.Objects.Add(1)
	} else {
		d.prog.Skipped.Add(1)
		d.prog.BytesDone.Add(en.size)
	}
}

func (d *downloader) file(ctx context.Context, pool *storage.Pool, en *entry) error {
	if d.o.DryRun {
		return d.dryRun(ctx, en)
	}
	if skip, err := d.present(ctx, en); err != nil || skip {
		if skip {
			d.done(en, false)
		}
		return err
	}
	if dir := path.Dir(en.rel); dir != "." {
		// Many files share a directory: create each once (os.Root
		// resolves every component with openat, which adds up).
		if _, ok := d.dirs.Load(dir); !ok {
			if err := d.root.MkdirAll(dir, 0o755); err != nil {
				return storage.Permanentf("remove what blocks the directory, or the symlink leaving the destination", "create directory for %q: %w", en.rel, err)
			}
			d.dirs.Store(dir, true)
		}
	}
	tmp := en.rel + TempSuffix
	f, err := d.createTemp(tmp)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		f.Close()
		if !committed {
			_ = d.root.Remove(tmp)
		}
	}()
	if en.size > rangeThreshold {
		err = d.ranged(ctx, pool, f, en)
	} else {
		err = d.whole(ctx, f, en)
	}
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return storage.WithOp("write "+strconv.Quote(tmp), err)
	}
	if err := d.root.Rename(tmp, en.rel); err != nil {
		return storage.WithOp("rename "+strconv.Quote(tmp), err)
	}
	committed = true
	d.done(en, true)
	return nil
}

// createTemp creates the temporary file tmp, a fresh file, never an
// existing one: O_EXCL refuses whatever is at the name (a crashed run's
// partial file, or a link planted to make the download write through it),
// which is then removed before one more try. Removing first instead would
// cost every file two failed unlinks and a stat (os.Root's Remove tries
// the name as a file, then as a directory).
func (d *downloader) createTemp(tmp string) (*os.File, error) {
	const flags = os.O_RDWR | os.O_CREATE | os.O_EXCL
	f, err := d.root.OpenFile(tmp, flags, 0o644)
	if errors.Is(err, fs.ErrExist) {
		if err := d.root.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, storage.WithOp("remove "+strconv.Quote(tmp), err)
		}
		f, err = d.root.OpenFile(tmp, flags, 0o644)
	}
	if err != nil {
		return nil, storage.WithOp("create "+strconv.Quote(tmp), err)
	}
	return f, nil
}

// present reports whether the local file already has the object's content.
// It needs a known checksum (the manifest's, or the one the store keeps);
// with none the file is fetched again.
func (d *downloader) present(ctx context.Context, en *entry) (bool, error) {
	fi, err := d.root.Lstat(en.rel)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != en.size {
		return false, nil
	}
	if en.size == 0 {
		return true, nil
	}
	oi := storage.ObjectInfo{}
	if !en.hasCRC {
		var err error
		oi, err = storage.RetryValue(ctx, d.o.Retry, func(ctx context.Context) (storage.ObjectInfo, error) {
			return d.be.Stat(ctx, en.key)
		})
		if err != nil {
			return false, storage.WithOp("stat "+strconv.Quote(en.key), err)
		}
		if oi.Size != en.size || (!oi.HasCRC32C && oi.MD5 == nil) {
			return false, nil
		}
	}
	// What the Lstat saw may have been swapped for a FIFO since.
	f, ok := storage.OpenRegular(ctx, d.root, en.rel, d.o.OpenTimeout)
	if !ok {
		return false, nil
	}
	defer f.Close()
	h := storage.NewHasher(hashes(en, oi))
	n, err := storage.CopyBuffer(io.MultiWriter(h, d.prog.Verifying()), f)
	if err != nil {
		return false, nil
	}
	return verify(en, oi, n, h.Sums()) == nil, nil
}

func (d *downloader) whole(ctx context.Context, f *os.File, en *entry) error {
	moved := d.prog.Attempt()
	retry := false
	err := d.o.Retry.Do(ctx, func(ctx context.Context) error {
		moved.Restart()
		// Only a retry starts over: f is new and empty. Truncating it
		// anyway is not free on ext4 (auto_da_alloc): a file truncated to
		// 0 is taken for one being replaced, so its close starts writeback
		// of its data at once, in the download's time, not the kernel's.
		if retry {
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			if err := f.Truncate(0); err != nil {
				return err
			}
		}
		retry = true
		r, oi, err := d.be.NewReader(ctx, en.key, 0, -1)
		if err != nil {
			return err
		}
		r = storage.ContextReader(ctx, r)
		defer r.Close()
		h := storage.NewHasher(hashes(en, oi))
		n, err := storage.CopyBuffer(io.MultiWriter(storage.FileWriter(f), h, moved), r)
		if err != nil {
			return err
		}
		return d.judge(ctx, verify(en, oi, n, h.Sums()))
	})
	return storage.WithOp("download "+strconv.Quote(en.key), err)
}
