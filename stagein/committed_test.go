package stagein_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// commit stores tree under loc's prefix and then, as kdefer-stage out does,
// the manifest listing it (with the optional checksums extra).
func commit(t *testing.T, be storage.Backend, loc storage.Location, tree stagetest.Tree, extra storage.Checksums) {
	t.Helper()
	start := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	m := &stagecontract.Manifest{Version: stagecontract.ManifestVersion, Tool: "kdefer-stage test", Prefix: loc.String(),
		Identity: map[string]string{"namespace": "ns", "job": "producer", "pod": "producer-0-abcde", "uid": "uid-1", "index": "0"},
		Trigger:  "Evicted", Start: start, End: start.Add(time.Second), Files: []stagecontract.ManifestFile{}}
	for _, name := range tree.Keys() {
		storagetest.Put(t, be, loc.Prefix+name, tree[name])
		h := storage.NewHasher(storage.CRC32C | extra)
		_, _ = h.Write(tree[name])
		sums := h.Sums()
		m.Files = append(m.Files, stagecontract.ManifestFile{Key: name, Size: int64(len(tree[name])),
			Checksum: storage.FormatChecksum(sums.CRC32C), Checksums: sums.Extra(), ModTime: start})
		m.TotalBytes += int64(len(tree[name]))
	}
	putManifestOf(t, be, loc, m)
}

func putManifestOf(t *testing.T, be storage.Backend, loc storage.Location, m *stagecontract.Manifest) {
	t.Helper()
	data, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	storagetest.Put(t, be, loc.Prefix+stagecontract.ManifestKey, data)
}

// flipByte damages the stored file:// object key in place, keeping its size
// (what bit rot, or a hand edit, does to a bucket).
func flipByte(t *testing.T, dir, key string) []byte {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(key))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

// A prefix that holds a kdefer manifest is staged in from it: exactly the
// files it lists, each checked against the checksums it records, however
// the prefix URL was written.
func TestCommittedPrefix(t *testing.T) {
	ctx := context.Background()
	tree := stagetest.Tree{"a/out.dat": storagetest.RandBytes(3, 5000), "log.txt": []byte("done\n")}
	setup := func(t *testing.T, extra storage.Checksums) (string, string, storage.Backend, storage.Location) {
		dir := filepath.Join(t.TempDir(), "bucket")
		u := "file://" + dir
		be, loc := storagetest.Open(t, u)
		commit(t, be, loc, tree, extra)
		return dir, u, be, loc
	}

	for _, form := range []string{"Prefix", "ManifestURL"} {
		t.Run("Corrupt"+form, func(t *testing.T) {
			dir, u, be, _ := setup(t, 0)
			if form == "ManifestURL" {
				u += "/" + stagecontract.ManifestKey
			}
			bad := flipByte(t, dir, "a/out.dat")
			dst := t.TempDir()
			_, err := stagein.Run(ctx, inOpts(be, u, dst))
			wantCorrupt(t, err, dst, "a/out.dat",
				fmt.Sprintf("crc32c:%08x", storagetest.CRC(bad)), storage.FormatChecksum(storagetest.CRC(tree["a/out.dat"])))
		})
	}

	t.Run("CatalogueChecksum", func(t *testing.T) {
		// The CRC32C matches; the MD5 the manifest records does not.
		_, u, be, loc := setup(t, storage.MD5)
		m, err := storage.ReadManifest(ctx, be, loc.Prefix+stagecontract.ManifestKey, stagetest.FastRetry())
		if err != nil {
			t.Fatal(err)
		}
		good := m.Files[1].Checksums[stagecontract.ChecksumMD5]
		wrong := strings.Repeat("0", 32)
		m.Files[1].Checksums[stagecontract.ChecksumMD5] = wrong
		putManifestOf(t, be, loc, m)
		dst := t.TempDir()
		_, err = stagein.Run(ctx, inOpts(be, u, dst))
		wantCorrupt(t, err, dst, m.Files[1].Key, "md5:"+good, "md5:"+wrong)
	})

	t.Run("OnlyListedFiles", func(t *testing.T) {
		// A previous attempt's leftover is not part of the committed outputs.
		_, u, be, loc := setup(t, 0)
		storagetest.Put(t, be, loc.Prefix+"stale.dat", []byte("an earlier attempt's"))
		dst := t.TempDir()
		res, err := stagein.Run(ctx, inOpts(be, u, dst))
		if err != nil {
			t.Fatal(err)
		}
		if diff := stagetest.DiffTrees(tree, stagetest.ReadTree(t, dst)); diff != "" {
			t.Errorf("staged-in tree (want exactly the manifest's files):\n%s", diff)
		}
		if want := loc.KeyURL(loc.Prefix + stagecontract.ManifestKey); res.ManifestURL != want {
			t.Errorf("result's manifest URL %q, want %q", res.ManifestURL, want)
		}
		want := stagecontract.Committer{Pod: "producer-0-abcde", UID: "uid-1", Trigger: "Evicted"}
		if res.Committer == nil || *res.Committer != want {
			t.Errorf("result's committer %+v, want %+v", res.Committer, want)
		}
	})

	// An object that differs from a manifest the prefix no longer holds is
	// a rerun of the stage-out replacing it, not corruption: transient.
	t.Run("Rerun", func(t *testing.T) {
		dir, u, be, loc := setup(t, 0)
		hook := readHook{Backend: be, before: func(key string) {
			if key == loc.Prefix+"a/out.dat" {
				_ = os.Remove(filepath.Join(dir, filepath.FromSlash(stagecontract.ManifestKey)))
				_ = os.WriteFile(filepath.Join(dir, "a/out.dat"), storagetest.RandBytes(4, 5000), 0o644)
			}
		}}
		_, err := stagein.Run(ctx, inOpts(hook, u, t.TempDir()))
		if err == nil || storage.ClassOf(err) != storage.Transient || !strings.Contains(err.Error(), "manifest changed") {
			t.Errorf("stage-in while the stage-out reruns: err = %v, want a transient error saying the manifest changed", err)
		}
	})
}

// A prefix without kdefer's objects is staged in whole, checked against
// what the store keeps (TestPrefixIntegrityFile), and says no committer.
func TestPlainPrefix(t *testing.T) {
	u := "file://" + filepath.Join(t.TempDir(), "bucket")
	be, _ := storagetest.Open(t, u)
	tree := stagetest.Tree{"x.txt": []byte("x"), "d/y.txt": []byte("yy")}
	for _, k := range tree.Keys() {
		storagetest.Put(t, be, k, tree[k])
	}
	dst := t.TempDir()
	res, err := stagein.Run(context.Background(), inOpts(be, u, dst))
	if err != nil {
		t.Fatal(err)
	}
	if diff := stagetest.DiffTrees(tree, stagetest.ReadTree(t, dst)); diff != "" {
		t.Errorf("staged-in tree:\n%s", diff)
	}
	if res.ManifestURL != "" || res.Committer != nil {
		t.Errorf("a prefix without a manifest: result names manifest %q, committer %+v", res.ManifestURL, res.Committer)
	}
}

// A prefix with kdefer's objects but no manifest is a stage-out that never
// committed (killed, or a rerun in progress): refused, naming the fix.
func TestUncommittedPrefix(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "bucket")
	u := "file://" + dir
	be, loc := storagetest.Open(t, u)
	storagetest.Put(t, be, loc.Prefix+"part.dat", []byte("half of the outputs"))
	storagetest.Put(t, be, loc.Prefix+stagecontract.LogsDir+"producer-0/main.log", []byte("log"))
	dst := t.TempDir()
	_, err := stagein.Run(ctx, inOpts(be, u, dst))
	if err == nil || storage.ClassOf(err) != storage.Permanent {
		t.Fatalf("stage-in of an uncommitted prefix: err = %v, want a permanent error", err)
	}
	for _, s := range []string{"no manifest", "--allow-uncommitted"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if got := stagetest.ReadTree(t, dst); len(got) != 0 {
		t.Errorf("stage-in wrote %v", got.Keys())
	}

	// Allowed, it takes the objects as they are, kdefer's left out.
	o := inOpts(be, u, dst)
	o.AllowUncommitted = true
	if _, err := stagein.Run(ctx, o); err != nil {
		t.Fatalf("stage-in with AllowUncommitted: %v", err)
	}
	if diff := stagetest.DiffTrees(stagetest.Tree{"part.dat": []byte("half of the outputs")}, stagetest.ReadTree(t, dst)); diff != "" {
		t.Errorf("staged-in tree:\n%s", diff)
	}
}

// An object replaced after the manifest committed it (same size) is refused
// by a stage-in of the prefix: the store's own checksum is the replacement's
// and would pass it, the manifest's does not.
func testReplacedObject(t *testing.T, h storagetest.Harness) {
	u := h.URL(t)
	be, loc := storagetest.Open(t, u)
	tree := stagetest.Tree{"out.dat": storagetest.RandBytes(5, 3000)}
	commit(t, be, loc, tree, 0)
	bad := storagetest.RandBytes(6, 3000)
	storagetest.Put(t, be, loc.Prefix+"out.dat", bad)
	dst := t.TempDir()
	_, err := stagein.Run(context.Background(), inOpts(be, u, dst))
	wantCorrupt(t, err, dst, "out.dat", fmt.Sprintf("crc32c:%08x", storagetest.CRC(bad)), storage.FormatChecksum(storagetest.CRC(tree["out.dat"])))
}
