package stageout_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/adler32"
	"strings"
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

// testManifestChecksums: the checksums data catalogues register (Rucio's
// adler32, MD5, SHA-256) are recorded per file, right for every upload path
// (small Put, streamed Put, multipart: huge.bin is parts on S3), computed
// from the reads that upload (no file is read again for them), and a
// stage-in from the manifest refuses a file whose bytes do not match any
// one of them (a whole download, ranges combined, ranges read back).
func testManifestChecksums(t *testing.T, h storagetest.Harness) {
	ctx := context.Background()
	u := h.URL(t)
	be, loc := storagetest.Open(t, u)
	src := t.TempDir()
	tree := stagetest.SampleTree(5)
	stagetest.MakeTree(t, src, tree)

	var logs bytes.Buffer
	o := outOpts(be, src, u)
	o.Log = zerolog.New(&logs)
	o.Checksums = storage.Adler32 | storage.MD5 | storage.SHA256
	if _, err := stageout.Run(ctx, o); err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	if strings.Contains(logs.String(), "read file again") {
		t.Errorf("a file was read again for its checksums:\n%s", logs.String())
	}
	mkey := loc.Prefix + stagecontract.ManifestKey
	m, err := storage.ParseManifest(manifestBytes(t, be, loc))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, f := range m.Files {
		got[f.Key] = f.Checksums
	}
	want := map[string]map[string]string{}
	for k, b := range tree {
		md, sh := md5.Sum(b), sha256.Sum256(b)
		want[k] = map[string]string{"adler32": fmt.Sprintf("%08x", adler32.Checksum(b)), "md5": hex.EncodeToString(md[:]), "sha256": hex.EncodeToString(sh[:])}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("manifest checksums (-want +got):\n%s", diff)
	}

	// A rerun that skips every file still records them (the skip check's
	// read computes them).
	o.Log = zerolog.Nop()
	res, err := stageout.Run(ctx, o)
	if err != nil || res.Skipped != int64(len(tree)) {
		t.Fatalf("rerun: skipped %d of %d, %v", res.Skipped, len(tree), err)
	}
	m2, err := storage.ParseManifest(manifestBytes(t, be, loc))
	if err != nil || !storage.SameFiles(m.Files, m2.Files) {
		t.Fatalf("rerun changed the manifest's files (err %v)", err)
	}

	good := manifestBytes(t, be, loc)
	from := loc.KeyURL(mkey)
	if _, err := stagein.Run(ctx, inOpts(be, from, t.TempDir())); err != nil {
		t.Fatalf("stage-in: %v", err)
	}
	for _, bad := range []struct{ key, sum string }{
		{"top.txt", "md5"}, {"big/huge.bin", "adler32"}, {"big/huge.bin", "sha256"},
	} {
		t.Run(bad.key+"/"+bad.sum, func(t *testing.T) {
			old := got[bad.key][bad.sum]
			flipped := strings.Repeat("0", len(old))
			if old == flipped {
				flipped = strings.Repeat("1", len(old))
			}
			storagetest.Put(t, be, mkey, bytes.Replace(good, []byte(`"`+old+`"`), []byte(`"`+flipped+`"`), 1))
			t.Cleanup(func() { storagetest.Put(t, be, mkey, good) })
			_, err := stagein.Run(ctx, inOpts(be, from, t.TempDir()))
			if err == nil || !strings.Contains(err.Error(), bad.sum+":") {
				t.Fatalf("stage-in with a wrong %s of %s: %v, want a %s mismatch", bad.sum, bad.key, err, bad.sum)
			}
			var se *storage.Error
			if !errors.As(err, &se) {
				t.Errorf("error %v is not classified", err)
			}
		})
	}
}
