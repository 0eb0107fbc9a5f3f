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
//   - directories that cannot be listed, and names too long for a key;
//   - symbolic links leading out of the directory or to nothing, and hard
//     links whose file was not stored (the manifest records the others as
//     links: a file is stored once, whatever its number of names).
//
// The source directory itself is not a file to lose but the whole run: it,
// and every directory from the work volume's root down to it, is resolved
// without following a link or opening a special file
// (storage.OpenDirBeneath), and one that is a link, a FIFO or missing fails
// the run, permanent, before anything is read.
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
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout/walk"
	"github.com/kdefer/kdefer/storage"
)

// Options configure a stage-out.
type Options struct {
	// From is the local directory; To the destination URL (templates
	// already expanded).
	From, To string
	// VolumeRoot is the work volume's mount point From lies in: every
	// directory from it down to From is resolved without following a link
	// (storage.OpenDirBeneath). "" trusts From's whole path (a run by hand).
	VolumeRoot string
	// RequireFiles fails a run that finds no file to upload (none under
	// From, or none the filters choose); without it that is a warning and
	// the manifest lists no file.
	RequireFiles bool
	// Env looks up the KDEFER_* identity recorded in the manifest.
	Env func(string) (string, bool)
	// Overwrite lets this stage-out replace outputs another pod left
	// under the prefix (guardEarlierAttempt).
	Overwrite bool
	// Checksums are the checksums the manifest records besides CRC32C
	// (storage.ParseChecksums), computed in the pass that uploads each file.
	Checksums storage.Checksums

	// Logs, when its Source is set, are archived under the prefix's
	// stagecontract.LogsDir after the files and listed in the manifest.
	Logs Logs
	// Version is recorded in the manifest as "kdefer-stage <Version>".
	Version string
	// TransferOptions are shared with stage-in; Backend, when set, is
	// used instead of opening To.
	storage.TransferOptions
}

// Result is what a stage-out did.
type Result struct {
	storage.TransferResult
	// Manifest is the manifest the prefix holds after the run, without its
	// Files when this run wrote it: they are streamed from disk to the store,
	// never all held in memory.
	Manifest *stagecontract.Manifest
}

type file struct {
	rel, key string
	encoded  bool // key is not rel (storage.EncodeName)
	size     int64
	mtime    time.Time
	crc      uint32
	sums     storage.Sums // Options.Checksums
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
	filter, err := storage.NewFilter(o.Include, o.Exclude)
	if err != nil {
		return Result{}, storage.Usagef("%w", err)
	}
	// The directories down to From are the job's too: none is followed if
	// it is a link, none blocks if it is a FIFO.
	op := "open source directory " + strconv.Quote(o.From)
	root, err := storage.OpenDirBeneath(ctx, o.VolumeRoot, o.From, false, o.OpenTimeout)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return Result{}, unreadable(op, err)
	case errors.Is(err, fs.ErrNotExist):
		return Result{}, storage.Permanentf("point --from at the directory to upload", "%s: %w", op, err)
	case err != nil:
		// A link or special file on the way is permanent (the run fails
		// and keeps the volume); an open that hung, transient.
		return Result{}, storage.WithOp(op, err)
	}
	defer root.Close()

	// Walk first: the listing below is then one request, and progress
	// knows the total. The files chosen go to a temporary file, not memory;
	// what the walk cannot stage is unsaved, not fatal.
	e := &engine{o: o, root: root, prog: storage.NewProgress(o.Clock), prefix: loc.Prefix, prefixURL: loc.String(), manifestKey: loc.Prefix + stagecontract.ManifestKey, hardTargets: map[string]bool{}}
	warn := func(err error) {
		o.Log.Warn().Str("error", err.Error()).Msg("keep the file list in memory: no temporary file")
	}
	files := newSpill(warn)
	defer files.close()
	e.results = newSpill(func(error) {})
	defer e.results.close()
	e.links = newSpill(func(error) {})
	defer e.links.close()
	var spillErr error
	err = walk.Walk(ctx, root, walk.Options{Name: o.From, Prefix: loc.Prefix, Filter: filter, OpenTimeout: o.OpenTimeout, Log: o.Log}, walk.Visitor{File: func(wf walk.File) {
		f := file{rel: wf.Rel, key: wf.Key, encoded: wf.Encoded, size: wf.Size, mtime: wf.ModTime}
		e.prog.FilesTotal.Add(1)
		e.prog.BytesTotal.Add(f.size)
		if err := files.add(fileRecord(f)); err != nil && spillErr == nil {
			spillErr = err
		}
	}, Link: e.link, Skip: e.unsaved})
	if err == nil {
		err = spillErr
	}
	if err != nil {
		return Result{}, err
	}
	if err := e.noFiles(); err != nil {
		return Result{}, err
	}

	e.be = o.Backend
	if e.be == nil && !missingFileDir(o.DryRun, loc) {
		e.be, err = storage.Open(ctx, loc, o.TransferOptions.OpenOptions(!o.DryRun))
		if err != nil {
			return Result{}, err
		}
		defer e.be.Close()
	}
	if mp, ok := e.be.(storage.Multipart); ok {
		e.mp = mp
	}
	o.Log.Info().Str("from", o.From).Str("to", loc.String()).Bool("dryRun", o.DryRun).Int64("files", e.prog.FilesTotal.Load()).
		Int64("bytes", e.prog.BytesTotal.Load()).Int("concurrency", o.Concurrency).Msg("start stage-out")

	// One listing tells which objects exist already (and their sizes):
	// a HEAD per file would double the requests of a first run.
	existing := map[string]int64{}
	err = o.Retry.Do(ctx, func(ctx context.Context) error {
		if e.be == nil {
			return nil // a dry run to a file:// directory not created yet
		}
		clear(existing)
		e.hasManifest = false
		return e.be.List(ctx, loc.Prefix, func(oi storage.ObjectInfo) error {
			if oi.Key == e.manifestKey {
				e.hasManifest = true
			}
			existing[oi.Key] = oi.Size
			return nil
		})
	})
	if err != nil {
		return Result{}, storage.WithOp("list "+loc.String(), err)
	}

	if err := e.guardEarlierAttempt(ctx); err != nil {
		return Result{}, err
	}

	pctx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	go o.ReportProgress(pctx, e.prog)

	if err := e.each(ctx, files, loc.Prefix, existing); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("stop stage-out: %w", err)
	}

	if o.DryRun {
		e.prog.Log(o.Log, "report final progress")
		return Result{TransferResult: storage.TransferResult{Bytes: e.prog.Moved.Load(), Objects: e.prog.Objects.Load(),
			Skipped: e.prog.Skipped.Load(), TotalBytes: e.prog.BytesTotal.Load(), Unsaved: int64(len(e.unsavedFiles))}}, nil
	}
	// The files are stored; the pod's logs, then the manifest.
	logs, logWarnings, err := e.archiveLogs(ctx)
	if err != nil {
		return Result{}, err
	}
	// Every object is stored: now, and only now, the manifest.
	m := &stagecontract.Manifest{
		Version: stagecontract.ManifestVersion, Tool: "kdefer-stage " + o.Version, Prefix: loc.String(),
		Identity: identity(o.Env), Start: start.UTC(), TotalBytes: e.totalBytes, Logs: logs,
		LogWarnings: logWarnings,
	}
	m.Trigger, _ = o.Env(stagecontract.EnvTrigger)
	m.ExitCode, _ = o.Env(stagecontract.EnvExitCode)
	if err := e.writeManifest(ctx, m); err != nil {
		return Result{}, err
	}
	e.committed(ctx)
	res := Result{TransferResult: storage.TransferResult{
		Bytes: e.prog.Moved.Load(), Objects: e.prog.Objects.Load(), Skipped: e.prog.Skipped.Load(),
		TotalBytes: m.TotalBytes, ManifestURL: loc.KeyURL(e.manifestKey), Unsaved: int64(len(m.Unsaved)),
		Logs: int64(len(logs)), LogWarnings: summaryLogWarnings(logWarnings),
	}, Manifest: m}
	e.prog.Log(o.Log, "report final progress")
	return res, nil
}

// each stores the spilled files on the pool's workers, reading them back
// one at a time: a worker takes a file before the next is read, so memory
// holds as many files as there are workers.
func (e *engine) each(ctx context.Context, files *spill, prefix string, existing map[string]int64) error {
	pool := storage.NewPool(ctx, e.o.Concurrency)
	errStop := errors.New("stop")
	err := files.each(func(rec []byte) error {
		f, err := parseFileRecord(rec)
		if err == nil {
			f.key, f.encoded, err = storage.KeyFor(prefix, f.rel) // as the walk did
		}
		if err != nil {
			pool.Fail(err)
			return errStop
		}
		if !pool.Submit(func(ctx context.Context) { pool.Fail(e.file(ctx, pool, &f, existing)) }) {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		pool.Fail(err)
	}
	return pool.Wait()
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
	prefix      string
	prefixURL   string // for messages: no credentials, no query
	manifestKey string

	mu           sync.Mutex
	hasManifest  bool            // a manifest from an earlier run exists
	wrote        bool            // this run stored an object
	results      *spill          // manifest entries (JSON) of the files stored
	links        *spill          // manifest entries (JSON) of the links (links.go)
	hardTargets  map[string]bool // files hard links name: stored yet?
	totalBytes   int64           // of the files stored
	resultsErr   error
	unsavedFiles []stagecontract.UnsavedFile
}
