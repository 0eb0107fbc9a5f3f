package stageout

import (
	"bytes"
	"crypto/md5"
	"hash/adler32"
	"testing"

	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// The optional checksums come from the reads that upload the file: a
// retry's reads of bytes already hashed are skipped, parts combine, and
// only bytes no read passed over in order are read again.
func TestSumsFollowTheUploadReads(t *testing.T) {
	data := storagetest.RandBytes(3, 10_000)
	r := bytes.NewReader(data)
	read := func(s *sums, off, n int64) { s.saw(data[off:off+n], off) }
	wantAdler := adler32.Checksum(data)
	wantMD5 := md5.Sum(data)

	// One Put, retried after 6000 bytes: the second pass hashes nothing twice.
	s := newSums(storage.Adler32|storage.MD5, int64(len(data)), 0)
	read(s, 0, 4000)
	read(s, 4000, 2000)
	read(s, 0, 5000)
	read(s, 5000, 5000)
	got, reread, err := s.result(r)
	if err != nil || reread != 0 || got.Adler32 != wantAdler || !bytes.Equal(got.MD5, wantMD5[:]) {
		t.Errorf("retried put: adler32 %08x (want %08x), md5 %x (want %x), reread %d, err %v", got.Adler32, wantAdler, got.MD5, wantMD5, reread, err)
	}

	// Parallel parts, out of order: Adler-32 alone combines per part.
	s = newSums(storage.Adler32, int64(len(data)), 3000)
	for _, off := range []int64{9000, 3000, 0, 6000} {
		read(s, off, min(3000, int64(len(data))-off))
	}
	got, reread, err = s.result(r)
	if err != nil || reread != 0 || got.Adler32 != wantAdler || got.Set != storage.Adler32 {
		t.Errorf("parallel parts: adler32 %08x (want %08x), set %v, reread %d, err %v", got.Adler32, wantAdler, got.Set, reread, err)
	}

	// MD5 over parts read out of order: what was not read in order is read
	// again, and said so.
	s = newSums(storage.MD5, int64(len(data)), 3000)
	read(s, 0, 3000)
	read(s, 6000, 3000)
	got, reread, err = s.result(r)
	if err != nil || reread != 7000 || !bytes.Equal(got.MD5, wantMD5[:]) {
		t.Errorf("out of order: md5 %x (want %x), reread %d (want 7000), err %v", got.MD5, wantMD5, reread, err)
	}

	// An empty file has checksums too.
	s = newSums(storage.Adler32|storage.SHA256, 0, 0)
	got, _, _ = s.result(bytes.NewReader(nil))
	if got.Adler32 != 1 || len(got.SHA256) != 32 {
		t.Errorf("empty file: %+v", got)
	}
}
