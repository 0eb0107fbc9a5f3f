// Package stageout uploads a directory tree under an object-storage prefix:
// files in parallel, large files in parallel parts, each file's CRC32C
// computed in the pass that uploads it, objects already stored with the
// same size and checksum skipped, and the manifest written last.
//
// It owns the upload side of the stage contract. It must not change the
// source directory, must not delete any object but an outdated manifest of
// its own prefix, and must not import stagein: what both engines share
// lives in storage.
package stageout

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// Options configure a stage-out.
type Options struct {
	// From is the local directory; To the destination URL (templates
	// already expanded).
	From, To         string
	Include, Exclude []string
	// Env looks up the KDEFER_* identity recorded in the manifest.
	Env func(string) (string, bool)
	// Version is recorded in the manifest as "kdefer-stage <Version>".
	Version string
	// TransferOptions are shared with stage-in; Backend, when set, is
	// used instead of opening To.
	storage.TransferOptions
}

// Result is what a stage-out did.
type Result struct {
	storage.TransferResult
	// Manifest is the manifest the prefix holds after the run.
	Manifest *stagecontract.Manifest
}

type file struct {
	rel, key string
	size     int64
	mtime    time.Time
	crc      uint32
}

// Run performs the stage-out.
func Run(ctx context.Context, o Options) (Result, error) {
	o.TransferOptions = o.TransferOptions.WithDefaults()
	if o.Env == nil {
		o.Env = os.LookupEnv
	}
	start := o.Clock.Now()
	loc, err := storage.ParseURL(o.To)
	if err != nil {
		return Result{}, err
	}
	filter, err := NewFilter(o.Include, o.Exclude)
	if err != nil {
		return Result{}, storage.Usagef("%w", err)
	}
	root, err := os.OpenRoot(o.From)
	if errors.Is(err, fs.ErrPermission) {
		return Result{}, unreadable("open source directory "+strconv.Quote(o.From), err)
	}
	if err != nil {
		return Result{}, storage.Permanentf("point --from at the directory to upload", "open source directory: %w", err)
	}
	defer root.Close()

	// Walk and check every name before any byte moves, so a hostile or
	// unrepresentable file name fails the run before it has done anything.
	files, err := walk(root, loc.Prefix, filter, o.Log)
	if err != nil {
		return Result{}, err
	}

	be := o.Backend
	if be == nil {
		be, err = storage.Open(ctx, loc, storage.OpenOptions{Concurrency: o.Concurrency, Create: true, IdleTimeout: o.IdleTimeout})
		if err != nil {
			return Result{}, err
		}
		defer be.Close()
	}

	prog := storage.NewProgress(o.Clock)
	for _, f := range files {
		prog.FilesTotal.Add(1)
		prog.BytesTotal.Add(f.size)
	}
	o.Log.Info().Str("from", o.From).Str("to", loc.String()).Int64("files", prog.FilesTotal.Load()).
		Int64("bytes", prog.BytesTotal.Load()).Int("concurrency", o.Concurrency).Msg("start stage-out")

	// One listing tells which objects exist already (and their sizes):
	// a HEAD per file would double the requests of a first run.
	manifestKey := loc.Prefix + stagecontract.ManifestKey
	existing := map[string]int64{}
	hasManifest := false
	err = o.Retry.Do(ctx, func(ctx context.Context) error {
		clear(existing)
		hasManifest = false
		return be.List(ctx, loc.Prefix, func(oi storage.ObjectInfo) error {
			if oi.Key == manifestKey {
				hasManifest = true
			}
			existing[oi.Key] = oi.Size
			return nil
		})
	})
	if err != nil {
		return Result{}, storage.WithOp("list "+loc.String(), err)
	}

	pctx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	go prog.Run(pctx, o.Log, o.ProgressInterval)

	e := &engine{o: o, be: be, root: root, prog: prog, manifestKey: manifestKey, hasManifest: hasManifest}
	if mp, ok := be.(storage.Multipart); ok {
		e.mp = mp
	}
	pool := storage.NewPool(ctx, o.Concurrency)
	err = pool.Each(len(files), func(ctx context.Context, i int) error {
		f := &files[i]
		size, exists := existing[f.key] // read-only once listed
		return e.file(ctx, pool, f, exists && size == f.size)
	})
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("stop stage-out: %w", err)
	}

	// Every object is stored: now, and only now, the manifest.
	m := &stagecontract.Manifest{
		Version: stagecontract.ManifestVersion, Tool: "kdefer-stage " + o.Version, Prefix: loc.String(),
		Identity: identity(o.Env), Start: start.UTC(), Files: make([]stagecontract.ManifestFile, len(files)),
	}
	m.Trigger, _ = o.Env(stagecontract.EnvTrigger)
	m.ExitCode, _ = o.Env(stagecontract.EnvExitCode)
	for i, f := range files {
		m.Files[i] = stagecontract.ManifestFile{Key: f.rel, Size: f.size, Checksum: storage.FormatChecksum(f.crc), ModTime: f.mtime.UTC()}
		m.TotalBytes += f.size
	}
	if err := e.writeManifest(ctx, m); err != nil {
		return Result{}, err
	}
	res := Result{TransferResult: storage.TransferResult{
		Bytes: prog.Moved.Load(), Objects: prog.Objects.Load(), Skipped: prog.Skipped.Load(),
		TotalBytes: m.TotalBytes, ManifestURL: loc.KeyURL(manifestKey),
	}, Manifest: m}
	prog.Log(o.Log, "report final progress")
	return res, nil
}

func identity(env func(string) (string, bool)) map[string]string {
	id := map[string]string{}
	for k, name := range stagecontract.IdentityEnv {
		if v, ok := env(name); ok && v != "" {
			id[k] = v
		}
	}
	if len(id) == 0 {
		return nil
	}
	return id
}

type engine struct {
	o           Options
	be          storage.Backend
	mp          storage.Multipart
	root        *os.Root
	prog        *storage.Progress
	manifestKey string

	mu          sync.Mutex
	hasManifest bool // a manifest from an earlier run exists
	wrote       bool // this run stored an object
}

// beforeWrite removes an earlier run's manifest before this run changes any
// object it lists: a manifest must only ever describe objects as they are.
func (e *engine) beforeWrite(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.wrote = true
	if !e.hasManifest {
		return nil
	}
	err := e.o.Retry.Do(ctx, func(ctx context.Context) error { return e.be.Delete(ctx, e.manifestKey) })
	if err != nil {
		return storage.WithOp("remove outdated manifest", err)
	}
	e.hasManifest = false
	return nil
}

func (e *engine) file(ctx context.Context, pool *storage.Pool, f *file, sameSize bool) error {
	fh, err := e.root.Open(f.rel)
	if err != nil {
		return unreadable("open "+strconv.Quote(f.rel), err)
	}
	defer fh.Close()
	if sameSize {
		skip, err := e.alreadyStored(ctx, fh, f)
		if err != nil {
			return err
		}
		if skip {
			e.prog.Skipped.Add(1)
			e.prog.FilesDone.Add(1)
			e.prog.BytesDone.Add(f.size)
			return nil
		}
	}
	if err := e.beforeWrite(ctx); err != nil {
		return err
	}
	if e.mp != nil {
		if ps := e.mp.PartSize(f.size); ps > 0 {
			return e.multipart(ctx, pool, fh, f, ps)
		}
	}
	moved := e.prog.Attempt()
	err = e.o.Retry.Do(ctx, func(ctx context.Context) error {
		moved.Restart()
		crc, err := e.be.Put(ctx, f.key, fh, f.size, moved.Add)
		f.crc = crc
		return err
	})
	if err != nil {
		return storage.WithOp("upload "+strconv.Quote(f.rel), err)
	}
	e.prog.Objects.Add(1)
	e.prog.FilesDone.Add(1)
	return nil
}

// alreadyStored reports whether the object at f.key has f's content: same
// size (known from the listing) and the same checksum, compared with the
// strongest one the store keeps. Without a stored checksum the object is
// rewritten: an unverifiable object is not known to be complete.
func (e *engine) alreadyStored(ctx context.Context, fh *os.File, f *file) (bool, error) {
	var oi storage.ObjectInfo
	err := e.o.Retry.Do(ctx, func(ctx context.Context) error {
		var err error
		oi, err = e.be.Stat(ctx, f.key)
		return err
	})
	if errors.Is(err, storage.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, storage.WithOp("stat "+strconv.Quote(f.key), err)
	}
	if oi.Size != f.size {
		return false, nil
	}
	if f.size == 0 {
		return true, nil // nothing to compare; stores keep no checksum of empty objects
	}
	if !oi.HasCRC32C && oi.MD5 == nil {
		return false, nil
	}
	h := md5.New()
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var w io.Writer = crc
	if !oi.HasCRC32C {
		w = io.MultiWriter(crc, h)
	}
	n, err := storage.CopyBuffer(w, io.NewSectionReader(fh, 0, f.size))
	if err != nil {
		return false, unreadable("read "+strconv.Quote(f.rel), err)
	}
	if n != f.size {
		return false, nil
	}
	f.crc = crc.Sum32()
	if oi.HasCRC32C {
		return oi.CRC32C == f.crc, nil
	}
	return bytes.Equal(oi.MD5, h.Sum(nil)), nil
}

func (e *engine) writeManifest(ctx context.Context, m *stagecontract.Manifest) error {
	if !e.wrote && e.hasManifest {
		// Nothing changed this run: keep the earlier manifest if it lists
		// exactly these files, and rewrite nothing.
		if old, err := storage.ReadManifest(ctx, e.be, e.manifestKey, e.o.Retry); err == nil && storage.SameFiles(old.Files, m.Files) {
			*m = *old
			return nil
		}
	}
	m.End = e.o.Clock.Now().UTC()
	data, err := m.Marshal()
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	err = e.o.Retry.Do(ctx, func(ctx context.Context) error {
		_, err := e.be.Put(ctx, e.manifestKey, bytes.NewReader(data), int64(len(data)), nil)
		return err
	})
	return storage.WithOp("write manifest", err)
}
