package stageout_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// The engine's cases run on every store the Backend contract runs on: a
// store that passes the contract must also resume, keep manifests honest
// and feed stage-in.
func TestEveryStore(t *testing.T) {
	storagetest.ForEachStore(t, func(t *testing.T, h storagetest.Harness) {
		t.Run("StageOutInResume", func(t *testing.T) { testStageOutIn(t, h) })
		t.Run("InterruptedRunLeavesNoManifest", func(t *testing.T) { testInterrupted(t, h) })
		t.Run("ManifestChecksums", func(t *testing.T) { testManifestChecksums(t, h) })
	})
}

func outOpts(be storage.Backend, from, to string) stageout.Options {
	return stageout.Options{From: from, To: to, Version: "test",
		TransferOptions: storage.TransferOptions{Backend: be, Retry: stagetest.FastRetry(), Log: zerolog.Nop()},
		Env: func(k string) (string, bool) {
			v, ok := map[string]string{"KDEFER_POD": "p-0", "KDEFER_TRIGGER": "Succeeded", "KDEFER_EXIT_CODE": "0"}[k]
			return v, ok
		}}
}

func inOpts(be storage.Backend, from, to string) stagein.Options {
	return stagein.Options{From: from, To: to, TransferOptions: storage.TransferOptions{Backend: be, Retry: stagetest.FastRetry(), Log: zerolog.Nop()}}
}

func manifestBytes(t *testing.T, be storage.Backend, loc storage.Location) []byte {
	t.Helper()
	return storagetest.Read(t, be, loc.Prefix+stagecontract.ManifestKey, 0, -1)
}

func testStageOutIn(t *testing.T, h storagetest.Harness) {
	ctx := context.Background()
	u := h.URL(t)
	be, loc := storagetest.Open(t, u)
	src := t.TempDir()
	tree := stagetest.SampleTree(40)
	stagetest.MakeTree(t, src, tree)
	var total int64
	for _, b := range tree {
		total += int64(len(b))
	}

	res, err := stageout.Run(ctx, outOpts(be, src, u))
	if err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	want := stageout.Result{TransferResult: storage.TransferResult{Bytes: total, Objects: int64(len(tree)), TotalBytes: total, ManifestURL: loc.KeyURL(loc.Prefix + stagecontract.ManifestKey)}}
	if diff := cmp.Diff(want, res, cmpResult); diff != "" {
		t.Errorf("first stage-out result (-want +got):\n%s", diff)
	}
	m, err := storage.ParseManifest(manifestBytes(t, be, loc))
	if err != nil {
		t.Fatal(err)
	}
	if m.Trigger != "Succeeded" || m.Identity["pod"] != "p-0" || m.Tool != "kdefer-stage test" || m.End.Before(m.Start) {
		t.Errorf("manifest header = trigger %q identity %v tool %q start %v end %v", m.Trigger, m.Identity, m.Tool, m.Start, m.End)
	}
	got := map[string]string{}
	for _, f := range m.Files {
		got[f.Key] = f.Checksum
	}
	wantSums := map[string]string{}
	for k, b := range tree {
		wantSums[k] = storage.FormatChecksum(storagetest.CRC(b))
	}
	if diff := cmp.Diff(wantSums, got); diff != "" {
		t.Errorf("manifest checksums (-want +got):\n%s", diff)
	}
	for k, b := range tree {
		oi, err := be.Stat(ctx, loc.Prefix+k)
		if err != nil {
			t.Fatalf("stat %s: %v", k, err)
		}
		if oi.Size != int64(len(b)) || (oi.HasCRC32C && oi.CRC32C != storagetest.CRC(b)) {
			t.Errorf("stored %s: size %d crc %08x, want %d %08x", k, oi.Size, oi.CRC32C, len(b), storagetest.CRC(b))
		}
	}

	// A rerun skips everything and leaves the manifest byte for byte.
	before := manifestBytes(t, be, loc)
	res, err = stageout.Run(ctx, outOpts(be, src, u))
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	want = stageout.Result{TransferResult: storage.TransferResult{Skipped: int64(len(tree)), TotalBytes: total, ManifestURL: want.ManifestURL}}
	if diff := cmp.Diff(want, res, cmpResult); diff != "" {
		t.Errorf("rerun result (-want +got):\n%s", diff)
	}
	if !bytes.Equal(before, manifestBytes(t, be, loc)) {
		t.Errorf("rerun rewrote the manifest although nothing changed")
	}

	// Same size, new content: exactly that object is rewritten.
	changed := "d1/e1/f001.dat"
	tree[changed] = bytes.Repeat([]byte{'x'}, len(tree[changed]))
	stagetest.MakeTree(t, src, stagetest.Tree{changed: tree[changed]})
	res, err = stageout.Run(ctx, outOpts(be, src, u))
	if err != nil {
		t.Fatalf("rerun after change: %v", err)
	}
	if res.Objects != 1 || res.Skipped != int64(len(tree)-1) || res.Bytes != int64(len(tree[changed])) {
		t.Errorf("rerun after change: objects %d skipped %d bytes %d, want 1, %d, %d", res.Objects, res.Skipped, res.Bytes, len(tree)-1, len(tree[changed]))
	}
	m, err = storage.ParseManifest(manifestBytes(t, be, loc))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if f.Key == changed && f.Checksum != storage.FormatChecksum(storagetest.CRC(tree[changed])) {
			t.Errorf("manifest still has the old checksum of %s", changed)
		}
	}

	// Stage-in from the manifest and from the prefix.
	for _, from := range []string{loc.KeyURL(loc.Prefix + stagecontract.ManifestKey), u} {
		dst := t.TempDir()
		r, err := stagein.Run(ctx, inOpts(be, from, dst))
		if err != nil {
			t.Fatalf("stage-in %s: %v", storage.Redact(from), err)
		}
		if d := stagetest.DiffTrees(tree, stagetest.ReadTree(t, dst)); d != "" {
			t.Errorf("stage-in %s tree:\n%s", storage.Redact(from), d)
		}
		if r.Objects != int64(len(tree)) || r.Bytes != total {
			t.Errorf("stage-in result objects %d bytes %d, want %d %d", r.Objects, r.Bytes, len(tree), total)
		}
		// Corrupt one file (same size) and delete another: a rerun fixes
		// exactly those and skips the rest.
		stagetest.MakeTree(t, dst, stagetest.Tree{"top.txt": []byte("TOP\n")})
		if err := os.Remove(filepath.Join(dst, "empty")); err != nil {
			t.Fatal(err)
		}
		r, err = stagein.Run(ctx, inOpts(be, from, dst))
		if err != nil {
			t.Fatalf("stage-in rerun: %v", err)
		}
		if r.Objects != 2 || r.Skipped != int64(len(tree)-2) {
			t.Errorf("stage-in rerun: objects %d skipped %d, want 2 and %d", r.Objects, r.Skipped, len(tree)-2)
		}
		if d := stagetest.DiffTrees(tree, stagetest.ReadTree(t, dst)); d != "" {
			t.Errorf("stage-in rerun tree:\n%s", d)
		}
	}
}

var cmpResult = cmp.FilterPath(func(p cmp.Path) bool {
	s := p.String()
	return s == "Manifest"
}, cmp.Ignore())

// failingBackend fails every Put after the first n with a permanent error,
// like a crash or a revoked credential in the middle of a run.
type failingBackend struct {
	storage.Backend
	n    int64
	puts atomic.Int64
}

var errInjected = &storage.Error{Class: storage.Permanent, Err: errors.New("injected failure")}

func (f *failingBackend) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts storage.PutOptions) (uint32, error) {
	if strings.Contains(key, stagecontract.ReservedDir) { // kdefer's own objects (the uncommitted marker)
		return f.Backend.Put(ctx, key, src, size, opts)
	}
	if f.puts.Add(1) > f.n {
		return 0, errInjected
	}
	return f.Backend.Put(ctx, key, src, size, opts)
}

func testInterrupted(t *testing.T, h storagetest.Harness) {
	ctx := context.Background()
	u := h.URL(t)
	be, loc := storagetest.Open(t, u)
	src := t.TempDir()
	tree := stagetest.Tree{}
	for i := range 30 {
		tree[fmt.Sprintf("f%02d", i)] = storagetest.RandBytes(uint64(i), 5000+i)
	}
	stagetest.MakeTree(t, src, tree)
	o := outOpts(&failingBackend{Backend: be, n: 10}, src, u)
	o.Concurrency = 1
	if _, err := stageout.Run(ctx, o); !errors.Is(err, errInjected) {
		t.Fatalf("interrupted stage-out: err = %v, want the injected failure", err)
	}
	if _, err := be.Stat(ctx, loc.Prefix+stagecontract.ManifestKey); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("after an interrupted run, Stat(manifest) = %v; want no manifest", err)
	}
	res, err := stageout.Run(ctx, outOpts(be, src, u))
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	if res.Skipped != 10 || res.Objects != 20 {
		t.Errorf("rerun: skipped %d objects %d, want 10 and 20", res.Skipped, res.Objects)
	}
	dst := t.TempDir()
	if _, err := stagein.Run(ctx, inOpts(be, loc.KeyURL(loc.Prefix+stagecontract.ManifestKey), dst)); err != nil {
		t.Fatal(err)
	}
	if d := stagetest.DiffTrees(tree, stagetest.ReadTree(t, dst)); d != "" {
		t.Errorf("tree after resumed run:\n%s", d)
	}
}

// manifestFailingBackend refuses the manifest alone: every file is stored,
// the commit is not.
type manifestFailingBackend struct{ storage.Backend }

func (f manifestFailingBackend) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts storage.PutOptions) (uint32, error) {
	if strings.HasSuffix(key, stagecontract.ManifestKey) {
		return 0, errInjected
	}
	return f.Backend.Put(ctx, key, src, size, opts)
}

// An attempt that stored every file and failed at its manifest leaves the
// uncommitted marker; the rerun, which has nothing left to write, commits
// the prefix and removes the marker all the same.
func TestUncommittedMarkerGoesWithTheManifest(t *testing.T) {
	ctx := context.Background()
	u := "mem://marker/run/"
	be, loc := storagetest.Open(t, u)
	src := t.TempDir()
	stagetest.MakeTree(t, src, stagetest.Tree{"a.dat": storagetest.RandBytes(1, 5000), "b.dat": storagetest.RandBytes(2, 6000)})
	if _, err := stageout.Run(ctx, outOpts(manifestFailingBackend{be}, src, u)); !errors.Is(err, errInjected) {
		t.Fatalf("first attempt: %v, want the injected failure", err)
	}
	if _, err := be.Stat(ctx, loc.Prefix+stagecontract.UncommittedKey); err != nil {
		t.Fatalf("after the failed commit, Stat(%s) = %v; want the marker", stagecontract.UncommittedKey, err)
	}
	res, err := stageout.Run(ctx, outOpts(be, src, u))
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	if res.Objects != 0 || res.Skipped != 2 {
		t.Errorf("rerun: objects %d skipped %d, want 0 and 2 (nothing left to write)", res.Objects, res.Skipped)
	}
	if _, err := be.Stat(ctx, loc.Prefix+stagecontract.UncommittedKey); !errors.Is(err, storage.ErrNotExist) {
		t.Errorf("after the rerun, Stat(%s) = %v; want it removed", stagecontract.UncommittedKey, err)
	}
}
