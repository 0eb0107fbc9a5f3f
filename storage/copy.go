package storage

import (
	"errors"
	"io"
	"sync"
)

// copyBufSize is the size of each copy buffer. Buffers come from one pool and
// each worker holds at most one, so buffer memory is bounded by
// concurrency * copyBufSize (16 * 256 KiB = 4 MiB by default) whatever the
// number or size of files: no per-file or per-part buffers are ever
// allocated, since uploads stream from the file (io.ReaderAt sections) and
// downloads stream into it (WriteAt).
const copyBufSize = 256 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

func getBuf() *[]byte  { return bufPool.Get().(*[]byte) }
func putBuf(b *[]byte) { bufPool.Put(b) }

// CopyBuffer copies with a pooled buffer, writing whole buffers (all but
// the last write): a network body's reads return what the socket holds,
// often a few KiB, and each write of a download costs a system call and a
// hash call per chunk, so filling the buffer first means a 1 MiB object
// is written in 4 writes instead of one per read (the 1000 x 1 MiB
// download: ~15% less client CPU, test/bench/stage-runs.md). A local file's reads fill
// it anyway. Neither side's ReadFrom or WriteTo is used: an *os.File's
// would copy through a 32 KiB buffer of its own. A destination file goes
// through FileWriter, which splits the writes again for the page cache.
func CopyBuffer(dst io.Writer, src io.Reader) (int64, error) {
	b := getBuf()
	defer putBuf(b)
	return io.CopyBuffer(writerOnly{dst}, &fullReader{r: src}, *b)
}

// writerOnly hides its writer's other methods (io.ReaderFrom).
type writerOnly struct{ io.Writer }

// fullReader's Read fills p unless the source ends or fails first. Not
// io.ReadFull: its io.ErrUnexpectedEOF for a short end would hide the same
// error from a truncated HTTP body.
type fullReader struct {
	r   io.Reader
	eof bool
}

func (f *fullReader) Read(p []byte) (n int, err error) {
	if f.eof {
		return 0, io.EOF
	}
	for n < len(p) && err == nil {
		var m int
		m, err = f.r.Read(p[n:])
		n += m
	}
	if errors.Is(err, io.EOF) && n > 0 {
		// The end inside p: what was read is written first, and the
		// next Read reports the end.
		f.eof, err = true, nil
	}
	return n, err
}

// fileWriteSize is the largest write FileWriter passes on: 32 KiB, eight
// pages, the largest allocation (PAGE_ALLOC_COSTLY_ORDER) Linux serves from
// its per-CPU lists of recently freed pages.
const fileWriteSize = 32 << 10

// FileWriter returns w (a file) with every write split into pieces of at
// most 32 KiB. Linux sizes a new page-cache folio to the write that
// creates it (xfs, and ext4 since 6.16), and a folio above 32 KiB
// comes from the buddy allocator's large free blocks instead of the
// per-CPU lists: the blocks a VM with free page reporting (Firecracker,
// virtio-balloon) has handed back to its host, whose every page then
// faults in the host on first touch. On such a machine 256 KiB writes made
// the 4 x 256 MiB download take 0.87-1.42 s with 0.56-1.63 s of system
// CPU, 32 KiB writes 0.76-0.90 s with 0.61-0.69 s (five interleaved runs
// each; test/bench/stage-runs.md). The ~28,000 extra write calls a GB cost tens of
// milliseconds.
func FileWriter(w io.Writer) io.Writer { return fileWriter{w} }

type fileWriter struct{ w io.Writer }

func (f fileWriter) Write(p []byte) (n int, err error) {
	for len(p) > 0 && err == nil {
		var m int
		m, err = f.w.Write(p[:min(len(p), fileWriteSize)])
		n += m
		p = p[m:]
	}
	return n, err
}
