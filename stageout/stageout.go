// Package stageout uploads a directory tree under an object-storage prefix:
// files in parallel, large files in parallel parts, each file's CRC32C
// computed in the pass that uploads it, objects already stored with the
// same size and checksum skipped, and the manifest written last.
//
// The tree is untrusted (what a job's container left behind), so stage-out
// is best effort, stated exactly: a file that cannot be staged costs only
// itself. It is listed in the manifest's unsaved list with its reason and
// counted in the result, and the run still succeeds once every other file
// and the manifest are stored; only store errors fail the run. Unsaved are:
//   - files that vanish after the walk, cannot be read (permission, I/O) or
//     are not regular files when opened (a FIFO, device or socket, also one
//     swapped in after the walk: files are opened non-blocking through the
//     os.Root, which refuses links out of the directory, and checked on the
//     opened descriptor);
//   - files still changing after three reads (each read stores exactly the
//     size fstat gave at open, so the size recorded is the size stored; a
//     file that keeps changing is stored as last read and also listed);
//   - sparse files with more than 1 GiB of holes (sparseReason: reading them
//     would send every hole as zeros, and the manifest cannot record holes);
//   - directories that cannot be listed, and names too long for a key.
//
// Names the store cannot hold (invalid UTF-8, control characters, a
// backslash, kdefer's reserved directory) are stored under reversible
// encoded keys with the original name in the manifest (storage.EncodeName).
// Every read checks the context, so cancellation stops a copy even when the
// store's write would not.
//
// It owns the upload side of the stage contract. It must not change the
// source directory, must not delete any object but an outdated manifest of
// its own prefix, and must not import stagein: what both engines share
// lives in storage.
package stageout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
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
	encoded  bool // key is not rel (storage.EncodeName)
	size     int64
	mtime    time.Time
	crc      uint32
	stored   bool // stored (or found stored); else listed as unsaved
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

	// Walk first: the listing below is then one request, and progress
	// knows the total. What the walk cannot stage is unsaved, not fatal.
	var files []file
	var unsavedFiles []stagecontract.UnsavedFile
	err = walk(root, loc.Prefix, filter, o.Log, func(f file) { files = append(files, f) }, func(rel, reason string) {
		o.Log.Warn().Str("path", storage.ManifestPath(rel)).Str("reason", reason).Msg("skip unsaved file")
		unsavedFiles = append(unsavedFiles, unsavedFile(rel, reason))
	})
	if err != nil {
		return Result{}, err
	}
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.rel, b.rel) })

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

	e := &engine{o: o, be: be, root: root, prog: prog, manifestKey: manifestKey, hasManifest: hasManifest, unsavedFiles: unsavedFiles}
	if mp, ok := be.(storage.Multipart); ok {
		e.mp = mp
	}
	pool := storage.NewPool(ctx, o.Concurrency)
	err = pool.Each(len(files), func(ctx context.Context, i int) error {
		return e.file(ctx, pool, &files[i], existing)
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
		Identity: identity(o.Env), Start: start.UTC(), Files: make([]stagecontract.ManifestFile, 0, len(files)),
	}
	m.Trigger, _ = o.Env(stagecontract.EnvTrigger)
	m.ExitCode, _ = o.Env(stagecontract.EnvExitCode)
	for _, f := range files {
		if !f.stored {
			continue
		}
		mf := stagecontract.ManifestFile{Key: strings.TrimPrefix(f.key, loc.Prefix), Size: f.size, Checksum: storage.FormatChecksum(f.crc), ModTime: f.mtime.UTC()}
		if f.encoded {
			mf.Path = storage.ManifestPath(f.rel)
		}
		m.Files = append(m.Files, mf)
		m.TotalBytes += f.size
	}
	m.Unsaved = e.unsavedFiles
	slices.SortFunc(m.Unsaved, func(a, b stagecontract.UnsavedFile) int { return strings.Compare(a.Path, b.Path) })
	if err := e.writeManifest(ctx, m); err != nil {
		return Result{}, err
	}
	res := Result{TransferResult: storage.TransferResult{
		Bytes: prog.Moved.Load(), Objects: prog.Objects.Load(), Skipped: prog.Skipped.Load(),
		TotalBytes: m.TotalBytes, ManifestURL: loc.KeyURL(manifestKey), Unsaved: int64(len(m.Unsaved)),
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

	mu           sync.Mutex
	hasManifest  bool // a manifest from an earlier run exists
	wrote        bool // this run stored an object
	unsavedFiles []stagecontract.UnsavedFile
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

func (e *engine) writeManifest(ctx context.Context, m *stagecontract.Manifest) error {
	if !e.wrote && e.hasManifest {
		// Nothing changed this run: keep the earlier manifest if it lists
		// exactly these files, and rewrite nothing.
		if old, err := storage.ReadManifest(ctx, e.be, e.manifestKey, e.o.Retry); err == nil &&
			storage.SameFiles(old.Files, m.Files) && slices.Equal(old.Unsaved, m.Unsaved) {
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
