// Package storagetest is kdefer's conformance suite for storage backends,
// in the spirit of gocloud.dev's blob/drivertest: the same cases, covering
// the Backend contract (put, stat, ranged read, list, delete, multipart,
// error classes), run against every store that can run here (mem, file,
// versitygw, gofakes3, MinIO, fake-gcs-server, Azurite; see stores.go).
//
// It owns the Backend contract only. It must not import the stage engines
// (stagein, stageout) or test them: their cases live next to them and use
// this package's stores and helpers.
package storagetest

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kdefer/kdefer/storage"
)

// Harness describes a backend under test.
type Harness struct {
	// URL returns a stage URL prefix no other test uses.
	URL func(t *testing.T) string
	// NoCRC32C says the store keeps no CRC32C of an object (gofakes3, used
	// with checksum=md5): Stat reports none and a multipart upload's
	// full-object checksum cannot be verified by the server, so the suite
	// checks sizes and content there instead; each request's Content-MD5 is
	// what the server verifies.
	NoCRC32C bool
	// CRC32C says the store keeps a CRC32C of every object (S3 servers
	// given one, GCS for every object, composite ones too): Stat must
	// report it, so that a stage-in without a manifest checks its reads by
	// it (ranged ones too) and a resumed stage-out compares a file by it,
	// not by MD5. (S3 listings carry no checksums; a List that reports
	// one must report it right.)
	CRC32C bool
}

// Run runs the Backend contract suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"PutStatRead", testPutStatRead},
		{"Missing", testMissing},
		{"ListPrefix", testListPrefix},
		{"Multipart", testMultipart},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

// Open parses raw and opens its backend (creating the bucket where the
// store can), closed when the test ends.
func Open(t testing.TB, raw string) (storage.Backend, storage.Location) {
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

// CRC returns the CRC32C of b, as backends and manifests report it.
func CRC(b []byte) uint32 { return storage.UpdateCRC32C(0, b) }

// Put stores data under key and returns the CRC32C the backend reports.
func Put(t testing.TB, be storage.Backend, key string, data []byte) uint32 {
	t.Helper()
	crc, err := be.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), storage.PutOptions{})
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return crc
}

// Read returns n bytes of the object at key from off (n < 0: to the end).
func Read(t testing.TB, be storage.Backend, key string, off, n int64) []byte {
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
	be, loc := Open(t, h.URL(t))
	ctx := context.Background()
	// 9 MiB: more than the blob drivers buffer for one request, so azblob
	// and gs write it in blocks or chunks and must still keep a checksum.
	for i, size := range []int{0, 10, 1 << 20, 9 << 20} {
		data := RandBytes(uint64(i), size)
		key := loc.Prefix + fmt.Sprintf("dir/obj-%d", size)
		if got, want := Put(t, be, key, data), CRC(data); got != want {
			t.Errorf("Put(%d bytes) crc = %08x, want %08x", size, got, want)
		}
		oi, err := be.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if oi.Size != int64(size) {
			t.Errorf("Stat size = %d, want %d", oi.Size, size)
		}
		if oi.HasCRC32C && oi.CRC32C != CRC(data) {
			t.Errorf("Stat crc32c = %08x, want %08x", oi.CRC32C, CRC(data))
		}
		if sum := md5.Sum(data); oi.MD5 != nil && !bytes.Equal(oi.MD5, sum[:]) {
			t.Errorf("Stat md5 = %x, want %x", oi.MD5, sum)
		}
		if r, roi, err := be.NewReader(ctx, key, 0, -1); err != nil {
			t.Fatal(err)
		} else {
			r.Close()
			sum := md5.Sum(data)
			if roi.MD5 != nil && !bytes.Equal(roi.MD5, sum[:]) || roi.HasCRC32C && roi.CRC32C != CRC(data) || roi.Size != int64(size) {
				t.Errorf("whole read reports size %d, crc32c %v:%08x, md5 %x; want %d, %08x, %x", roi.Size, roi.HasCRC32C, roi.CRC32C, roi.MD5, size, CRC(data), sum)
			}
		}
		if h.CRC32C && !oi.HasCRC32C {
			t.Errorf("Stat of %d-byte object reports no CRC32C from a store that keeps one", size)
		}
		if !oi.HasCRC32C && oi.MD5 == nil && size > 0 {
			t.Errorf("Stat of %d-byte object reports no checksum: resumable runs could never skip it", size)
		}
		if got := Read(t, be, key, 0, -1); !bytes.Equal(got, data) {
			t.Errorf("read whole %d-byte object: content differs", size)
		}
		if size > 2000 {
			if got := Read(t, be, key, 100, 1000); !bytes.Equal(got, data[100:1100]) {
				t.Errorf("read range [100,1100): content differs")
			}
			if got := Read(t, be, key, int64(size-5), -1); !bytes.Equal(got, data[size-5:]) {
				t.Errorf("read range to end: got %d bytes", len(got))
			}
		}
	}
	// Overwrite replaces.
	key := loc.Prefix + "dir/obj-10"
	Put(t, be, key, []byte("replaced"))
	if got := Read(t, be, key, 0, -1); string(got) != "replaced" {
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
	be, loc := Open(t, h.URL(t))
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
	be, loc := Open(t, h.URL(t))
	for _, k := range []string{"a/1", "a/b/2", "a-sibling/3", "ab"} {
		Put(t, be, loc.Prefix+k, []byte(k))
	}
	var got []string
	err := be.List(context.Background(), loc.Prefix+"a/", func(oi storage.ObjectInfo) error {
		key := strings.TrimPrefix(oi.Key, loc.Prefix)
		got = append(got, key)
		if oi.HasCRC32C && oi.CRC32C != CRC([]byte(key)) {
			t.Errorf("List reports %s with crc32c %08x, want %08x", key, oi.CRC32C, CRC([]byte(key)))
		}
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
	be, loc := Open(t, h.URL(t))
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
	up, err := mp.Begin(ctx, key, storage.PutOptions{})
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
		if p.CRC != CRC(data) {
			t.Errorf("part %d crc %08x, want %08x", i+1, p.CRC, CRC(data))
		}
		parts = append(parts, p)
		if i == 0 {
			crc = p.CRC
		} else {
			crc = storage.CombineCRC32C(crc, p.CRC, p.Size)
		}
	}
	if crc != CRC(all) {
		t.Fatalf("combined crc %08x, want %08x", crc, CRC(all))
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
	switch {
	case h.NoCRC32C && (oi.Size != int64(len(all)) || oi.HasCRC32C):
		t.Errorf("Stat = size %d (has crc %v), want size %d and no CRC32C from a store that keeps none", oi.Size, oi.HasCRC32C, len(all))
	case !h.NoCRC32C && (oi.Size != int64(len(all)) || !oi.HasCRC32C || oi.CRC32C != crc):
		t.Errorf("Stat = size %d crc %08x (has %v), want size %d crc %08x", oi.Size, oi.CRC32C, oi.HasCRC32C, len(all), crc)
	}
	if got := Read(t, be, key, 0, -1); !bytes.Equal(got, all) {
		t.Errorf("multipart object content differs")
	}
	if h.NoCRC32C {
		return // nothing for the server to verify a wrong full-object checksum against
	}
	// A wrong full-object checksum must be refused by the server.
	up2, err := mp.Begin(ctx, key+"-bad", storage.PutOptions{})
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
