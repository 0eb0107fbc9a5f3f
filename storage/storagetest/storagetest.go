// Package storagetest is kdefer's conformance suite for storage backends,
// in the spirit of gocloud.dev's drivertest: the same tests, covering the
// Backend contract and the stage-out/stage-in engines on top of it, run
// against every backend that can run here (mem, file, versitygw, MinIO).
package storagetest

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/storage"
)

// Harness describes a backend under test.
type Harness struct {
	// URL returns a stage URL prefix no other test uses.
	URL func(t *testing.T) string
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"PutStatRead", testPutStatRead},
		{"Missing", testMissing},
		{"ListPrefix", testListPrefix},
		{"Multipart", testMultipart},
		{"StageOutInResume", testStageOutIn},
		{"InterruptedRunLeavesNoManifest", testInterrupted},
		{"HostileKeys", testHostileKeys},
		{"HostileManifest", testHostileManifest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

// FastRetry retries quickly: conformance tests exercise logic, not waiting.
func FastRetry() storage.RetryPolicy {
	return storage.RetryPolicy{Attempts: 5, Base: 5 * time.Millisecond, Max: 50 * time.Millisecond}
}

func open(t *testing.T, raw string) (storage.Backend, storage.Location) {
	t.Helper()
	loc, err := storage.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	be, err := storage.Open(context.Background(), loc, storage.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be, loc
}

// RandBytes returns n deterministic pseudo-random bytes.
func RandBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func crcOf(b []byte) uint32 { return storage.UpdateCRC32C(0, b) }

func put(t *testing.T, be storage.Backend, key string, data []byte) uint32 {
	t.Helper()
	crc, err := be.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return crc
}

func read(t *testing.T, be storage.Backend, key string, off, n int64) []byte {
	t.Helper()
	r, _, err := be.NewReader(context.Background(), key, off, n)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return b
}

func testPutStatRead(t *testing.T, h Harness) {
	be, loc := open(t, h.URL(t))
	ctx := context.Background()
	for i, size := range []int{0, 10, 1 << 20} {
		data := RandBytes(uint64(i), size)
		key := loc.Prefix + fmt.Sprintf("dir/obj-%d", size)
		if got, want := put(t, be, key, data), crcOf(data); got != want {
			t.Errorf("Put(%d bytes) crc = %08x, want %08x", size, got, want)
		}
		oi, err := be.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if oi.Size != int64(size) {
			t.Errorf("Stat size = %d, want %d", oi.Size, size)
		}
		if oi.HasCRC32C && oi.CRC32C != crcOf(data) {
			t.Errorf("Stat crc32c = %08x, want %08x", oi.CRC32C, crcOf(data))
		}
		if sum := md5.Sum(data); oi.MD5 != nil && !bytes.Equal(oi.MD5, sum[:]) {
			t.Errorf("Stat md5 = %x, want %x", oi.MD5, sum)
		}
		if !oi.HasCRC32C && oi.MD5 == nil && size > 0 {
			t.Errorf("Stat of %d-byte object reports no checksum: resumable runs could never skip it", size)
		}
		if got := read(t, be, key, 0, -1); !bytes.Equal(got, data) {
			t.Errorf("read whole %d-byte object: content differs", size)
		}
		if size > 2000 {
			if got := read(t, be, key, 100, 1000); !bytes.Equal(got, data[100:1100]) {
				t.Errorf("read range [100,1100): content differs")
			}
			if got := read(t, be, key, int64(size-5), -1); !bytes.Equal(got, data[size-5:]) {
				t.Errorf("read range to end: got %d bytes", len(got))
			}
		}
	}
	// Overwrite replaces.
	key := loc.Prefix + "dir/obj-10"
	put(t, be, key, []byte("replaced"))
	if got := read(t, be, key, 0, -1); string(got) != "replaced" {
		t.Errorf("after overwrite read %q", got)
	}
	if err := be.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := be.Delete(ctx, key); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
}

func testMissing(t *testing.T, h Harness) {
	be, loc := open(t, h.URL(t))
	ctx := context.Background()
	if _, err := be.Stat(ctx, loc.Prefix+"nope"); !errors.Is(err, storage.ErrNotExist) {
		t.Errorf("Stat(missing) = %v, want ErrNotExist", err)
	}
	if _, _, err := be.NewReader(ctx, loc.Prefix+"nope", 0, -1); !errors.Is(err, storage.ErrNotExist) {
		t.Errorf("NewReader(missing) = %v, want ErrNotExist", err)
	}
	if _, err := be.Stat(ctx, loc.Prefix+"nope"); storage.ClassOf(err) == storage.Transient {
		t.Errorf("Stat(missing) is classified transient: it would be retried")
	}
}

func testListPrefix(t *testing.T, h Harness) {
	be, loc := open(t, h.URL(t))
	for _, k := range []string{"a/1", "a/b/2", "a-sibling/3", "ab"} {
		put(t, be, loc.Prefix+k, []byte(k))
	}
	var got []string
	err := be.List(context.Background(), loc.Prefix+"a/", func(oi storage.ObjectInfo) error {
		got = append(got, strings.TrimPrefix(oi.Key, loc.Prefix))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	if diff := cmp.Diff([]string{"a/1", "a/b/2"}, got); diff != "" {
		t.Errorf("List(a/) (-want +got):\n%s", diff)
	}
}

func testMultipart(t *testing.T, h Harness) {
	be, loc := open(t, h.URL(t))
	mp, ok := be.(storage.Multipart)
	if !ok {
		t.Skip("backend uploads whole objects only")
	}
	if mp.PartSize(1<<20) != 0 {
		t.Errorf("PartSize(1MiB) = %d, want 0 (single PUT)", mp.PartSize(1<<20))
	}
	if ps := mp.PartSize(10 << 30); ps < 5<<20 || (10<<30)/ps > 10000 {
		t.Errorf("PartSize(10GiB) = %d: parts must be >= 5 MiB and at most 10000", ps)
	}
	ctx := context.Background()
	key := loc.Prefix + "multi"
	sizes := []int{5 << 20, 5 << 20, 1234}
	up, err := mp.Begin(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	var parts []storage.Part
	var crc uint32
	for i, n := range sizes {
		data := RandBytes(uint64(100+i), n)
		all = append(all, data...)
		p, err := up.PutPart(ctx, i+1, bytes.NewReader(data), int64(n))
		if err != nil {
			t.Fatal(err)
		}
		if p.CRC != crcOf(data) {
			t.Errorf("part %d crc %08x, want %08x", i+1, p.CRC, crcOf(data))
		}
		parts = append(parts, p)
		if i == 0 {
			crc = p.CRC
		} else {
			crc = storage.CombineCRC32C(crc, p.CRC, p.Size)
		}
	}
	if crc != crcOf(all) {
		t.Fatalf("combined crc %08x, want %08x", crc, crcOf(all))
	}
	if err := up.Complete(ctx, parts, crc); err != nil {
		t.Fatal(err)
	}
	// A retried Complete (the first response was lost) must not fail a
	// run whose object is stored.
	if err := up.Complete(ctx, parts, crc); err != nil {
		t.Errorf("second Complete of a completed upload: %v, want nil", err)
	}
	oi, err := be.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if oi.Size != int64(len(all)) || !oi.HasCRC32C || oi.CRC32C != crc {
		t.Errorf("Stat = size %d crc %08x (has %v), want size %d crc %08x", oi.Size, oi.CRC32C, oi.HasCRC32C, len(all), crc)
	}
	if got := read(t, be, key, 0, -1); !bytes.Equal(got, all) {
		t.Errorf("multipart object content differs")
	}
	// A wrong full-object checksum must be refused by the server.
	up2, err := mp.Begin(ctx, key+"-bad")
	if err != nil {
		t.Fatal(err)
	}
	p, err := up2.PutPart(ctx, 1, bytes.NewReader(all[:1000]), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := up2.Complete(ctx, []storage.Part{p}, p.CRC^1); err == nil {
		t.Errorf("Complete with a wrong full-object CRC32C succeeded; the server does not verify it")
	}
	_ = up2.Abort(ctx)
}

// Tree is a set of files: relative path -> content.
type Tree map[string][]byte

// MakeTree writes files under dir.
func MakeTree(t testing.TB, dir string, tree Tree) {
	t.Helper()
	for rel, data := range tree {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ReadTree reads every regular file under dir.
func ReadTree(t testing.TB, dir string) Tree {
	t.Helper()
	tree := Tree{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		tree[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// SampleTree has nested directories, an empty file, many small files and
// one file large enough for multipart uploads and ranged downloads.
func SampleTree(small int) Tree {
	tree := Tree{"empty": nil, "top.txt": []byte("top\n"), "big/huge.bin": RandBytes(7, 70<<20+12345)}
	for i := range small {
		tree[fmt.Sprintf("d%d/e%d/f%03d.dat", i%3, i%5, i)] = RandBytes(uint64(1000+i), 1000+i*37)
	}
	return tree
}

func diffTrees(want, got Tree) string {
	var out []string
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			out = append(out, "missing "+k)
		case !bytes.Equal(v, g):
			out = append(out, fmt.Sprintf("differs %s (%d vs %d bytes)", k, len(v), len(g)))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "extra "+k)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func outOpts(be storage.Backend, from, to string) stageout.Options {
	return stageout.Options{From: from, To: to, Backend: be, Retry: FastRetry(), Log: zerolog.Nop(), Version: "test",
		Env: func(k string) (string, bool) {
			v, ok := map[string]string{"KDEFER_POD": "p-0", "KDEFER_TRIGGER": "Succeeded", "KDEFER_EXIT_CODE": "0"}[k]
			return v, ok
		}}
}

func inOpts(be storage.Backend, from, to string) stagein.Options {
	return stagein.Options{From: from, To: to, Backend: be, Retry: FastRetry(), Log: zerolog.Nop()}
}

func manifestBytes(t *testing.T, be storage.Backend, loc storage.Location) []byte {
	t.Helper()
	return read(t, be, loc.Prefix+stagecontract.ManifestKey, 0, -1)
}

func testStageOutIn(t *testing.T, h Harness) {
	ctx := context.Background()
	u := h.URL(t)
	be, loc := open(t, u)
	src := t.TempDir()
	tree := SampleTree(40)
	MakeTree(t, src, tree)
	var total int64
	for _, b := range tree {
		total += int64(len(b))
	}

	res, err := stageout.Run(ctx, outOpts(be, src, u))
	if err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	want := stageout.Result{Bytes: total, Objects: int64(len(tree)), TotalBytes: total, ManifestURL: loc.KeyURL(loc.Prefix + stagecontract.ManifestKey)}
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
		wantSums[k] = storage.FormatChecksum(crcOf(b))
	}
	if diff := cmp.Diff(wantSums, got); diff != "" {
		t.Errorf("manifest checksums (-want +got):\n%s", diff)
	}
	for k, b := range tree {
		oi, err := be.Stat(ctx, loc.Prefix+k)
		if err != nil {
			t.Fatalf("stat %s: %v", k, err)
		}
		if oi.Size != int64(len(b)) || (oi.HasCRC32C && oi.CRC32C != crcOf(b)) {
			t.Errorf("stored %s: size %d crc %08x, want %d %08x", k, oi.Size, oi.CRC32C, len(b), crcOf(b))
		}
	}

	// A rerun skips everything and leaves the manifest byte for byte.
	before := manifestBytes(t, be, loc)
	res, err = stageout.Run(ctx, outOpts(be, src, u))
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	want = stageout.Result{Skipped: int64(len(tree)), TotalBytes: total, ManifestURL: want.ManifestURL}
	if diff := cmp.Diff(want, res, cmpResult); diff != "" {
		t.Errorf("rerun result (-want +got):\n%s", diff)
	}
	if !bytes.Equal(before, manifestBytes(t, be, loc)) {
		t.Errorf("rerun rewrote the manifest although nothing changed")
	}

	// Same size, new content: exactly that object is rewritten.
	changed := "d1/e1/f001.dat"
	tree[changed] = bytes.Repeat([]byte{'x'}, len(tree[changed]))
	MakeTree(t, src, Tree{changed: tree[changed]})
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
		if f.Key == changed && f.Checksum != storage.FormatChecksum(crcOf(tree[changed])) {
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
		if d := diffTrees(tree, ReadTree(t, dst)); d != "" {
			t.Errorf("stage-in %s tree:\n%s", storage.Redact(from), d)
		}
		if r.Objects != int64(len(tree)) || r.Bytes != total {
			t.Errorf("stage-in result objects %d bytes %d, want %d %d", r.Objects, r.Bytes, len(tree), total)
		}
		// Corrupt one file (same size) and delete another: a rerun fixes
		// exactly those and skips the rest.
		MakeTree(t, dst, Tree{"top.txt": []byte("TOP\n")})
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
		if d := diffTrees(tree, ReadTree(t, dst)); d != "" {
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

func (f *failingBackend) Put(ctx context.Context, key string, src io.ReaderAt, size int64, p func(int64)) (uint32, error) {
	if f.puts.Add(1) > f.n {
		return 0, errInjected
	}
	return f.Backend.Put(ctx, key, src, size, p)
}

func testInterrupted(t *testing.T, h Harness) {
	ctx := context.Background()
	u := h.URL(t)
	be, loc := open(t, u)
	src := t.TempDir()
	tree := Tree{}
	for i := range 30 {
		tree[fmt.Sprintf("f%02d", i)] = RandBytes(uint64(i), 5000+i)
	}
	MakeTree(t, src, tree)
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
	if d := diffTrees(tree, ReadTree(t, dst)); d != "" {
		t.Errorf("tree after resumed run:\n%s", d)
	}
}

// HostileKeys are object keys that must never become paths outside the
// destination directory (or at all).
var HostileKeys = []string{
	"../escape", "../../escape", "a/../../escape", "/abs", "a//b", "./a", "a/./b", "a/..",
	"..", "a\\..\\..\\escape", "ctl\nname", "_kdefer/manifest.json.evil-but-reserved/x",
}

func testHostileKeys(t *testing.T, h Harness) {
	ctx := context.Background()
	for _, key := range HostileKeys {
		t.Run(strings.NewReplacer("/", "_", "\n", "NL", "\\", "BS").Replace(key), func(t *testing.T) {
			u := h.URL(t)
			be, loc := open(t, u)
			put(t, be, loc.Prefix+"ok.txt", []byte("fine"))
			if _, err := be.Put(ctx, loc.Prefix+key, bytes.NewReader([]byte("evil")), 4, nil); err != nil {
				t.Skipf("the server refuses key %q itself: %v", key, err)
			}
			// Some stores normalise keys; test what was actually stored.
			// Nothing may be written anywhere: not in dst, not beside it.
			outside := t.TempDir()
			dst := filepath.Join(outside, "dst")
			_, err := stagein.Run(ctx, inOpts(be, u, dst))
			var listed []string
			_ = be.List(ctx, loc.Prefix, func(oi storage.ObjectInfo) error { listed = append(listed, oi.Key); return nil })
			hostile := false
			for _, k := range listed {
				if k != loc.Prefix+"ok.txt" && storage.CheckRel(strings.TrimPrefix(k, loc.Prefix)) != nil && !strings.HasPrefix(strings.TrimPrefix(k, loc.Prefix), stagecontract.ReservedDir) {
					hostile = true
				}
			}
			if !hostile {
				t.Skipf("the store normalised %q into harmless keys %q", key, listed)
			}
			if storage.ClassOf(err) != storage.Permanent || err == nil {
				t.Errorf("stage-in with key %q: err = %v, want a permanent error", key, err)
			}
			if got := ReadTree(t, outside); len(got) != 0 {
				t.Errorf("files written although a hostile key refuses the run: %v", keys(got))
			}
		})
	}

	// A symlink inside the destination that points outside it.
	t.Run("SymlinkedParent", func(t *testing.T) {
		u := h.URL(t)
		be, loc := open(t, u)
		put(t, be, loc.Prefix+"link/evil.txt", []byte("evil"))
		dst, out := t.TempDir(), t.TempDir()
		if err := os.Symlink(out, filepath.Join(dst, "link")); err != nil {
			t.Fatal(err)
		}
		_, err := stagein.Run(ctx, inOpts(be, u, dst))
		if err == nil || storage.ClassOf(err) != storage.Permanent {
			t.Errorf("stage-in through a symlinked parent: err = %v, want permanent", err)
		}
		if got := ReadTree(t, out); len(got) != 0 {
			t.Errorf("files written through the symlink: %v", keys(got))
		}
	})
}

func keys(t Tree) []string {
	var ks []string
	for k := range t {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func testHostileManifest(t *testing.T, h Harness) {
	ctx := context.Background()
	u := h.URL(t)
	be, loc := open(t, u)
	put(t, be, loc.Prefix+"a.txt", []byte("a"))
	m := fmt.Sprintf(`{"version":1,"tool":"x","prefix":"x","start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:00:00Z","totalBytes":2,"files":[
		{"key":"a.txt","size":1,"checksum":"%s","mtime":"2026-01-01T00:00:00Z"},
		{"key":"../escape","size":1,"checksum":"%s","mtime":"2026-01-01T00:00:00Z"}]}`,
		storage.FormatChecksum(crcOf([]byte("a"))), storage.FormatChecksum(crcOf([]byte("a"))))
	put(t, be, loc.Prefix+stagecontract.ManifestKey, []byte(m))
	parent := t.TempDir()
	dst := filepath.Join(parent, "dst")
	_, err := stagein.Run(ctx, inOpts(be, loc.KeyURL(loc.Prefix+stagecontract.ManifestKey), dst))
	if err == nil || storage.ClassOf(err) != storage.Permanent {
		t.Errorf("stage-in of a hostile manifest: err = %v, want permanent", err)
	}
	if got := ReadTree(t, parent); len(got) != 0 {
		t.Errorf("stage-in of a hostile manifest wrote %v", keys(got))
	}
}
