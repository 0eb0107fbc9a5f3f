package stageout

import (
	"io"
	"sync"

	"github.com/kdefer/kdefer/storage"
)

// sums computes a file's optional manifest checksums (Options.Checksums) in
// the pass that uploads it, never by a read of its own: the source feeds it
// every byte a backend reads (source.ReadAt), and each span hashes the bytes
// of its range the first time they pass, in order. A retried upload reads
// bytes already hashed again; they are skipped.
//
// Combinable checksums (Adler-32) get one span per multipart part, which
// combine, so parts still go in parallel. MD5 and SHA-256 need the whole
// file in order: one span, and multipart sends the parts one after the other.
type sums struct {
	mu    sync.Mutex
	spans []span
}

type span struct {
	next, end int64 // next byte to hash, end of the range
	h         *storage.Hasher
}

// newSums returns the sums of set over size bytes uploaded in parts of
// partSize (0: one Put), or nil when set is empty.
func newSums(set storage.Checksums, size, partSize int64) *sums {
	if set == 0 {
		return nil
	}
	s := &sums{}
	if partSize <= 0 || set&^storage.Combinable != 0 {
		partSize = max(size, 1)
	}
	for off := int64(0); ; off += partSize {
		s.spans = append(s.spans, span{next: off, end: min(off+partSize, size), h: storage.NewHasher(set)})
		if off+partSize >= size {
			break
		}
	}
	return s
}

// saw hashes what of p, read at off, continues a span.
func (s *sums) saw(p []byte, off int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.spans {
		sp := &s.spans[i]
		end := off + int64(len(p))
		if off > sp.next || end <= sp.next || sp.next >= sp.end {
			continue // a gap before it, or nothing new
		}
		b := p[sp.next-off : min(end, sp.end)-off]
		_, _ = sp.h.Write(b)
		sp.next += int64(len(b))
	}
}

// result completes any span a backend did not read through in order (none
// of kdefer's do; this is a safety net, a read of the missing bytes only)
// and returns the checksums of the whole file, and how many bytes it had to
// read itself.
func (s *sums) result(src io.ReaderAt) (storage.Sums, int64, error) {
	if s == nil {
		return storage.Sums{}, 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var total storage.Sums
	var reread int64
	for i := range s.spans {
		sp := &s.spans[i]
		if sp.next < sp.end {
			n, err := storage.CopyBuffer(sp.h, io.NewSectionReader(src, sp.next, sp.end-sp.next))
			reread += n
			if err != nil {
				return storage.Sums{}, reread, err
			}
			sp.next = sp.end
		}
		if i == 0 {
			total = sp.h.Sums()
			continue
		}
		total = total.Combine(sp.h.Sums(), sp.end-s.spans[i-1].end)
	}
	return total, reread, nil
}
