package stagein

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kdefer/kdefer/storage"
)

var errChecksum = errors.New("checksum mismatch")

// corruptFix is the fix of an object that is not what its store says.
const corruptFix = "restore the object, or rerun the stage-out that wrote it"

// hashes returns the checksums a download of en computes: CRC32C always,
// the optional ones its manifest entry records, and MD5 for an object read
// without a manifest whose store offers an MD5 but no CRC32C (only then: it
// costs more CPU than the copy).
func hashes(en *entry, oi storage.ObjectInfo) storage.Checksums {
	set := storage.CRC32C | en.extra.Set
	if !en.hasCRC && !oi.HasCRC32C && oi.MD5 != nil {
		set |= storage.MD5
	}
	return set
}

// verify checks n bytes read, with checksums got (hashes' set), against
// what is known of the object. A manifest always decides when there is one
// (its CRC32C and whichever optional checksums it records), and a mismatch
// with it is retried: the object may be being replaced by a rerun of the
// stage-out, or the bytes damaged on the way. It is permanent when the
// store's own full-object CRC32C (oi) agrees with the bytes read: then the
// object itself differs from what the manifest recorded. Without one the store's own word decides — the size it listed
// and sent, its CRC32C, else its MD5 — and a mismatch is permanent: the
// stored object is corrupt or truncated, which no retry mends, and a
// stage-in that wrote it anyway would hand the job wrong inputs with exit 0.
func verify(en *entry, oi storage.ObjectInfo, n int64, got storage.Sums) error {
	if en.hasCRC {
		if n != en.size {
			return &storage.Error{Class: storage.Transient, Err: fmt.Errorf("got %d bytes, manifest says %d", n, en.size)}
		}
		want := en.extra
		want.Set |= storage.CRC32C
		want.CRC32C = en.crc
		m := got.Mismatch(want)
		if m == "" {
			return nil
		}
		if oi.HasCRC32C && oi.CRC32C == got.CRC32C && n == oi.Size {
			// The store vouches for the bytes read: they arrived intact, and
			// the object is not the one the manifest describes (replaced
			// after it was written). Reading it again cannot mend that.
			return &storage.Error{Class: storage.Permanent, Fix: corruptFix, Err: fmt.Errorf("%w: %s (the manifest's); the store has crc32c:%08x, so the object changed after the manifest was written", errChecksum, m, oi.CRC32C)}
		}
		return &storage.Error{Class: storage.Transient, Err: fmt.Errorf("%w: %s (the manifest's)", errChecksum, m)}
	}
	switch {
	case n != en.size:
		return &storage.Error{Class: storage.Permanent, Fix: corruptFix, Err: fmt.Errorf("size mismatch: read %d bytes, the store lists %d", n, en.size)}
	case n != oi.Size:
		return &storage.Error{Class: storage.Permanent, Fix: corruptFix, Err: fmt.Errorf("size mismatch: read %d bytes, the store says %d", n, oi.Size)}
	case oi.HasCRC32C && got.CRC32C != oi.CRC32C:
		return &storage.Error{Class: storage.Permanent, Fix: corruptFix, Err: fmt.Errorf("%w: read crc32c:%08x, the store has crc32c:%08x", errChecksum, got.CRC32C, oi.CRC32C)}
	case got.Set&storage.MD5 != 0 && !bytes.Equal(got.MD5, oi.MD5):
		return &storage.Error{Class: storage.Permanent, Fix: corruptFix, Err: fmt.Errorf("%w: read md5:%x, the store has md5:%x", errChecksum, got.MD5, oi.MD5)}
	}
	return nil
}

// fileSums returns the checksums set of f's content: a large file
// downloaded in parallel ranges, for the checksums that do not combine
// (MD5, SHA-256), is read back once from the local file.
func fileSums(f *os.File, set storage.Checksums) (storage.Sums, error) {
	h := storage.NewHasher(set)
	if _, err := storage.CopyBuffer(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return storage.Sums{}, err
	}
	return h.Sums(), nil
}
