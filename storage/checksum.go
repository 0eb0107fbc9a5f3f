package storage

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/adler32"
	"slices"
	"strings"

	"github.com/kdefer/kdefer/stagecontract"
)

// Checksums is a set of checksum algorithms: CRC32C, which every transfer
// computes, and the ones a manifest records on request for data catalogues
// (stagecontract.ManifestChecksums).
type Checksums uint8

// The algorithms of a Checksums set.
const (
	CRC32C Checksums = 1 << iota
	Adler32
	MD5
	SHA256
)

// Combinable are the checksums whose values over consecutive pieces combine
// into the value over the whole (CombineCRC32C, CombineAdler32), so parallel
// parts and ranges still yield them in one pass. MD5 and SHA-256 do not:
// they need the bytes in order.
const Combinable = CRC32C | Adler32

// extraChecksums are the manifest's optional checksums by name.
var extraChecksums = []struct {
	c    Checksums
	name string
	hex  int // digits
}{
	{Adler32, stagecontract.ChecksumAdler32, 8},
	{MD5, stagecontract.ChecksumMD5, 32},
	{SHA256, stagecontract.ChecksumSHA256, 64},
}

// ParseChecksums parses the names of the optional manifest checksums
// (stagecontract.ManifestChecksums; "crc32c" is accepted and always on).
func ParseChecksums(names []string) (Checksums, error) {
	var set Checksums
	for _, n := range names {
		for _, one := range strings.Split(n, ",") {
			one = strings.ToLower(strings.TrimSpace(one))
			c, ok := checksumByName(one)
			if !ok {
				return 0, fmt.Errorf("checksum %q is not one of crc32c, %s", one, strings.Join(stagecontract.ManifestChecksums, ", "))
			}
			set |= c
		}
	}
	return set &^ CRC32C, nil
}

func checksumByName(name string) (Checksums, bool) {
	if name == "crc32c" {
		return CRC32C, true
	}
	for _, x := range extraChecksums {
		if x.name == name {
			return x.c, true
		}
	}
	return 0, false
}

// Names returns the names of the optional checksums in the set, in
// documentation order.
func (c Checksums) Names() []string {
	var names []string
	for _, x := range extraChecksums {
		if c&x.c != 0 {
			names = append(names, x.name)
		}
	}
	return names
}

// Sums are the checksums of some bytes; Set says which are valid.
type Sums struct {
	Set         Checksums
	CRC32C      uint32
	Adler32     uint32
	MD5, SHA256 []byte
}

// Extra renders the optional checksums the way the manifest records them
// (ManifestFile.Checksums), nil when there are none.
func (s Sums) Extra() map[string]string {
	if s.Set&^CRC32C == 0 {
		return nil
	}
	m := map[string]string{}
	if s.Set&Adler32 != 0 {
		m[stagecontract.ChecksumAdler32] = fmt.Sprintf("%08x", s.Adler32)
	}
	if s.Set&MD5 != 0 {
		m[stagecontract.ChecksumMD5] = hex.EncodeToString(s.MD5)
	}
	if s.Set&SHA256 != 0 {
		m[stagecontract.ChecksumSHA256] = hex.EncodeToString(s.SHA256)
	}
	return m
}

// ParseExtra parses a manifest file's optional checksums (Extra's output).
func ParseExtra(m map[string]string) (Sums, error) {
	var s Sums
	for _, name := range sortedKeys(m) {
		v := m[name]
		c, ok := checksumByName(name)
		if !ok || c == CRC32C {
			return Sums{}, fmt.Errorf("checksums: %q is not one of %s", name, strings.Join(stagecontract.ManifestChecksums, ", "))
		}
		b, err := hex.DecodeString(v)
		if err != nil || strings.ToLower(v) != v || len(v) != digitsOf(c) {
			return Sums{}, fmt.Errorf("checksums: %s %q is not %d lowercase hex digits", name, v, digitsOf(c))
		}
		s.Set |= c
		switch c {
		case Adler32:
			s.Adler32 = uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		case MD5:
			s.MD5 = b
		case SHA256:
			s.SHA256 = b
		}
	}
	return s, nil
}

func digitsOf(c Checksums) int {
	for _, x := range extraChecksums {
		if x.c == c {
			return x.hex
		}
	}
	return 8
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Mismatch compares got with the checksums want holds (those in want.Set)
// and describes the first that differs, or returns "".
func (s Sums) Mismatch(want Sums) string {
	got := s
	switch {
	case want.Set&CRC32C != 0 && got.CRC32C != want.CRC32C:
		return fmt.Sprintf("got crc32c:%08x, want crc32c:%08x", got.CRC32C, want.CRC32C)
	case want.Set&Adler32 != 0 && got.Adler32 != want.Adler32:
		return fmt.Sprintf("got adler32:%08x, want adler32:%08x", got.Adler32, want.Adler32)
	case want.Set&MD5 != 0 && !bytes.Equal(got.MD5, want.MD5):
		return fmt.Sprintf("got md5:%x, want md5:%x", got.MD5, want.MD5)
	case want.Set&SHA256 != 0 && !bytes.Equal(got.SHA256, want.SHA256):
		return fmt.Sprintf("got sha256:%x, want sha256:%x", got.SHA256, want.SHA256)
	}
	return ""
}

// Combine returns the combinable checksums of the bytes s covers followed
// by next's lenNext bytes (only those both hold).
func (s Sums) Combine(next Sums, lenNext int64) Sums {
	out := Sums{Set: s.Set & next.Set & Combinable}
	out.CRC32C = CombineCRC32C(s.CRC32C, next.CRC32C, lenNext)
	out.Adler32 = CombineAdler32(s.Adler32, next.Adler32, lenNext)
	return out
}

// Hasher computes a set of checksums of what is written to it, in one pass:
// the one hashing writer of both engines (a tee of the upload or download
// stream, or of a verifying read).
type Hasher struct {
	set      Checksums
	crc      uint32
	adler    hash.Hash32
	md5, sha hash.Hash
}

// NewHasher returns a Hasher for set.
func NewHasher(set Checksums) *Hasher {
	h := &Hasher{set: set}
	if set&Adler32 != 0 {
		h.adler = adler32.New()
	}
	if set&MD5 != 0 {
		h.md5 = md5.New()
	}
	if set&SHA256 != 0 {
		h.sha = sha256.New()
	}
	return h
}

// Write hashes p; it never fails.
func (h *Hasher) Write(p []byte) (int, error) {
	if h.set&CRC32C != 0 {
		h.crc = UpdateCRC32C(h.crc, p)
	}
	if h.adler != nil {
		_, _ = h.adler.Write(p)
	}
	if h.md5 != nil {
		_, _ = h.md5.Write(p)
	}
	if h.sha != nil {
		_, _ = h.sha.Write(p)
	}
	return len(p), nil
}

// Sums returns the checksums of what was written.
func (h *Hasher) Sums() Sums {
	s := Sums{Set: h.set, CRC32C: h.crc}
	if h.adler != nil {
		s.Adler32 = h.adler.Sum32()
	}
	if h.md5 != nil {
		s.MD5 = h.md5.Sum(nil)
	}
	if h.sha != nil {
		s.SHA256 = h.sha.Sum(nil)
	}
	return s
}

// adlerBase is Adler-32's modulus.
const adlerBase = 65521

// CombineAdler32 returns the Adler-32 of A||B given adler(A), adler(B) and
// len(B) (zlib's adler32_combine), so that parts uploaded in parallel
// still yield the whole file's Adler-32 without a second read.
func CombineAdler32(adlerA, adlerB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return adlerA
	}
	rem := uint64(lenB % adlerBase)
	sum1 := uint64(adlerA & 0xffff)
	sum2 := rem * sum1 % adlerBase
	sum1 += uint64(adlerB&0xffff) + adlerBase - 1
	sum2 += uint64(adlerA>>16) + uint64(adlerB>>16) + adlerBase - rem
	sum1 %= adlerBase
	sum2 %= adlerBase
	return uint32(sum1 | sum2<<16)
}
