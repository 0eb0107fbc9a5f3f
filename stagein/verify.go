package stagein

import (
	"bytes"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kdefer/kdefer/storage"
)

var errChecksum = errors.New("checksum mismatch")

// corruptFix is the fix of an object that is not what its store says.
const corruptFix = "restore the object, or rerun the stage-out that wrote it"

// needMD5 reports whether an object read without a manifest can only be
// checked by the MD5 its store offers (no CRC32C): only then is one
// computed, as it costs more CPU than the copy.
func needMD5(en *entry, oi storage.ObjectInfo) bool {
	return !en.hasCRC && !oi.HasCRC32C && oi.MD5 != nil
}

// verify checks n bytes read, with CRC32C crc and MD5 md5sum (nil unless
// needMD5), against what is known of the object. A manifest always decides
// when there is one, and a mismatch with it is retried: the object may be
// being replaced by a rerun of the stage-out. Without one the store's own
// word decides — the size it listed and sent, its CRC32C, else its MD5 —
// and a mismatch is permanent: the stored object is corrupt or truncated,
// which no retry mends, and a stage-in that wrote it anyway would hand the
// job wrong inputs with exit 0.
func verify(en *entry, oi storage.ObjectInfo, n int64, crc uint32, md5sum []byte) error {
	if en.hasCRC {
		if n != en.size {
			return &storage.Error{Class: storage.Transient, Err: fmt.Errorf("got %d bytes, manifest says %d", n, en.size)}
		}
		if crc != en.crc {
			return &storage.Error{Class: storage.Transient, Err: fmt.Errorf("%w: got crc32c:%08x, want crc32c:%08x", errChecksum, crc, en.crc)}
		}
		return nil
	}
	switch {
	case n != en.size:
		return &storage.Error{Class: storage.Permanent, Fix: corruptFix, Err: fmt.Errorf("size mismatch: read %d bytes, the store lists %d", n, en.size)}
	case n != oi.Size:
		return &storage.Error{Class: storage.Permanent, Fix: corruptFix, Err: fmt.Errorf("size mismatch: read %d bytes, the store says %d", n, oi.Size)}
	case oi.HasCRC32C && crc != oi.CRC32C:
		return &storage.Error{Class: storage.Permanent, Fix: corruptFix, Err: fmt.Errorf("%w: read crc32c:%08x, the store has crc32c:%08x", errChecksum, crc, oi.CRC32C)}
	case needMD5(en, oi) && !bytes.Equal(md5sum, oi.MD5):
		return &storage.Error{Class: storage.Permanent, Fix: corruptFix, Err: fmt.Errorf("%w: read md5:%x, the store has md5:%x", errChecksum, md5sum, oi.MD5)}
	}
	return nil
}

// fileMD5 returns the MD5 of f's content (a large file downloaded in ranges,
// whose store offers an MD5 but no CRC32C: a second read of the local file).
func fileMD5(f *os.File) ([]byte, error) {
	h := md5.New()
	if _, err := storage.CopyBuffer(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
