package storage

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"hash/adler32"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Adler-32 of parts must combine into the whole file's, or a file uploaded
// in parallel parts would be registered with a wrong adler32.
func TestCombineAdler32(t *testing.T) {
	data := bytes.Repeat([]byte("kdefer rucio adler32 \xff\x00"), 9000) // > 65521: the modulus wraps
	for _, cut := range []int{0, 1, 7, 4096, 65521, 65522, len(data) - 1, len(data)} {
		a, b := data[:cut], data[cut:]
		got := CombineAdler32(adler32.Checksum(a), adler32.Checksum(b), int64(len(b)))
		if want := adler32.Checksum(data); got != want {
			t.Errorf("cut %d: combined %08x, want %08x", cut, got, want)
		}
	}
}

func FuzzCombineAdler32(f *testing.F) {
	f.Add([]byte("hello"), []byte("world"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		got := CombineAdler32(adler32.Checksum(a), adler32.Checksum(b), int64(len(b)))
		if want := adler32.Checksum(append(append([]byte{}, a...), b...)); got != want {
			t.Fatalf("combined %08x, want %08x", got, want)
		}
	})
}

// One Hasher computes every algorithm asked for, each as its reference
// implementation does, and the manifest form round-trips.
func TestHasher(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	h := NewHasher(CRC32C | Adler32 | MD5 | SHA256)
	for i := 0; i < len(data); i += 4099 { // uneven writes
		_, _ = h.Write(data[i:min(i+4099, len(data))])
	}
	got := h.Sums()
	md, sh := md5.Sum(data), sha256.Sum256(data)
	want := Sums{Set: CRC32C | Adler32 | MD5 | SHA256, CRC32C: UpdateCRC32C(0, data), Adler32: adler32.Checksum(data), MD5: md[:], SHA256: sh[:]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sums (-want +got):\n%s", diff)
	}
	extra := got.Extra()
	if extra["md5"] != hex.EncodeToString(md[:]) || extra["sha256"] != hex.EncodeToString(sh[:]) || len(extra) != 3 {
		t.Errorf("Extra() = %v", extra)
	}
	back, err := ParseExtra(extra)
	if err != nil {
		t.Fatal(err)
	}
	back.Set |= CRC32C
	back.CRC32C = got.CRC32C
	if m := got.Mismatch(back); m != "" {
		t.Errorf("round trip mismatch: %s", m)
	}
	if NewHasher(CRC32C).Sums().Extra() != nil {
		t.Errorf("Extra() of CRC32C alone is not nil")
	}
	other := back
	other.Adler32++
	if m := got.Mismatch(other); !strings.Contains(m, "adler32") {
		t.Errorf("Mismatch(adler32 off by one) = %q", m)
	}
}

func TestParseChecksums(t *testing.T) {
	got, err := ParseChecksums([]string{"adler32,MD5", " sha256", "crc32c"})
	if err != nil || got != Adler32|MD5|SHA256 {
		t.Errorf("ParseChecksums = %v, %v", got, err)
	}
	if names := got.Names(); strings.Join(names, ",") != "adler32,md5,sha256" {
		t.Errorf("Names() = %v", names)
	}
	if _, err := ParseChecksums([]string{"sha1"}); err == nil || !strings.Contains(err.Error(), "adler32, md5, sha256") {
		t.Errorf("ParseChecksums(sha1) = %v, want an error listing the choices", err)
	}
	for name, m := range map[string]map[string]string{
		"unknown":   {"sha1": "00"},
		"crc32c":    {"crc32c": "00000000"},
		"short":     {"adler32": "0000000"},
		"uppercase": {"adler32": "0000000A"},
		"not hex":   {"md5": strings.Repeat("z", 32)},
	} {
		if _, err := ParseExtra(m); err == nil {
			t.Errorf("ParseExtra(%s) accepted %v", name, m)
		}
	}
}
