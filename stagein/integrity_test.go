package stagein_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
	"github.com/kdefer/kdefer/test/fakegcs"
)

// readHook is a real backend whose reads first run a hook (to damage the
// stored object between the listing and the read) or are cut short with a
// clean EOF, as a broken proxy would.
type readHook struct {
	storage.Backend
	before func(key string)
	cut    int64 // > 0: deliver at most this many bytes of a whole read
}

func (h readHook) NewReader(ctx context.Context, key string, off, length int64) (io.ReadCloser, storage.ObjectInfo, error) {
	if h.before != nil {
		h.before(key)
	}
	r, oi, err := h.Backend.NewReader(ctx, key, off, length)
	if err != nil || h.cut <= 0 {
		return r, oi, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(r, h.cut), r}, oi, nil
}

// wantCorrupt checks that a stage-in failed permanently, naming the key and
// the two values that differ, and wrote nothing under that name.
func wantCorrupt(t *testing.T, err error, dst, key string, values ...string) {
	t.Helper()
	if err == nil || storage.ClassOf(err) != storage.Permanent {
		t.Fatalf("stage-in of a damaged %q: err = %v, want a permanent error", key, err)
	}
	for _, s := range append([]string{key + `"`}, values...) {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, key)); err == nil {
		t.Errorf("%s was written although its content is wrong", key)
	}
}

// Without a manifest, stage-in checks what the store offers (its MD5 here:
// file:// with metadata=sidecar keeps the one it computed on write) and the
// size it listed. Without sidecars (the default) a file:// store has no
// checksum of its own to check a prefix against; a manifest still has one.
func TestPrefixIntegrityFile(t *testing.T) {
	for _, size := range []int{1000, 64<<20 + 1} { // whole, and in ranges
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			if size > 1<<20 && testing.Short() {
				t.Skip("large object")
			}
			dir := filepath.Join(t.TempDir(), "store")
			u := "file://" + dir + "?metadata=sidecar"
			be, _ := storagetest.Open(t, u)
			data := storagetest.RandBytes(7, size)
			storagetest.Put(t, be, "data.bin", data)
			storagetest.Put(t, be, "other.txt", []byte("fine"))

			t.Run("Corrupt", func(t *testing.T) {
				bad := append([]byte(nil), data...)
				bad[size/2] ^= 0xff
				if err := os.WriteFile(filepath.Join(dir, "data.bin"), bad, 0o644); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := os.WriteFile(filepath.Join(dir, "data.bin"), data, 0o644); err != nil {
						t.Error(err)
					}
				}()
				dst := t.TempDir()
				_, err := stagein.Run(context.Background(), inOpts(be, u, dst))
				got, want := md5.Sum(bad), md5.Sum(data)
				wantCorrupt(t, err, dst, "data.bin", fmt.Sprintf("md5:%x", got), fmt.Sprintf("md5:%x", want))
			})
			t.Run("Truncated", func(t *testing.T) {
				// Listed whole, truncated before it is read.
				trunc := readHook{Backend: be, before: func(key string) {
					if key == "data.bin" {
						_ = os.Truncate(filepath.Join(dir, "data.bin"), int64(size-10))
					}
				}}
				defer func() {
					if err := os.WriteFile(filepath.Join(dir, "data.bin"), data, 0o644); err != nil {
						t.Error(err)
					}
				}()
				dst := t.TempDir()
				_, err := stagein.Run(context.Background(), inOpts(trunc, u, dst))
				wantCorrupt(t, err, dst, "data.bin", fmt.Sprint(size-10), fmt.Sprint(size))
			})
		})
	}
}

// On GCS the CRC32C the store keeps of every object decides, composite
// objects (which have no MD5) too: a large object replaced by same-size
// bytes after its Stat, while its ranges are read, is refused by the
// CRC32C the Stat gave (the GCS client checks only whole reads itself).
func TestPrefixIntegrityGCS(t *testing.T) {
	if testing.Short() {
		t.Skip("large object")
	}
	srv := fakegcs.Start(t)
	fakegcs.MakeBucket(srv, "integrity")
	const size = 64<<20 + 1 // read in ranges
	good := storagetest.RandBytes(9, size)
	bad := bytes.Clone(good)
	bad[size/2] ^= 0xff
	put := func(name string, data []byte) {
		srv.CreateObject(fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "integrity", Name: name}, Content: data})
	}
	put("p/data.bin", good)
	put("p/other.txt", []byte("fine"))
	u := "gs://integrity/p/"
	be, _ := storagetest.Open(t, u)
	var replace sync.Once
	swap := readHook{Backend: be, before: func(key string) {
		if strings.HasSuffix(key, "data.bin") {
			replace.Do(func() { put("p/data.bin", bad) })
		}
	}}
	dst := t.TempDir()
	_, err := stagein.Run(context.Background(), inOpts(swap, u, dst))
	wantCorrupt(t, err, dst, "data.bin", storage.FormatChecksum(storagetest.CRC(good)))
}

// On S3 the store's CRC32C and size decide; a stream cut short with a clean
// EOF is refused, never written as the file.
func TestPrefixIntegrityCut(t *testing.T) {
	storagetest.ForEachStore(t, func(t *testing.T, h storagetest.Harness) {
		u := h.URL(t)
		be, loc := storagetest.Open(t, u)
		data := storagetest.RandBytes(9, 5000)
		storagetest.Put(t, be, loc.Prefix+"data.bin", data)
		dst := t.TempDir()
		_, err := stagein.Run(context.Background(), inOpts(readHook{Backend: be, cut: 4000}, u, dst))
		wantCorrupt(t, err, dst, "data.bin", "4000", "5000")
		if got := stagetest.ReadTree(t, dst); len(got) != 0 {
			t.Errorf("stage-in wrote %v", got.Keys())
		}
		// Undamaged, the same object stages in, checked against the same sums.
		if _, err := stagein.Run(context.Background(), inOpts(be, u, dst)); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(dst, "data.bin")); string(got) != string(data) {
			t.Errorf("data.bin differs after stage-in")
		}
	})
}
