package storage

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// writeSizes records the size of every write it is given.
type writeSizes struct {
	bytes.Buffer
	sizes []int
}

func (w *writeSizes) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.Buffer.Write(p)
}

// A download's body arrives in small reads; CopyBuffer writes it in whole
// buffers, so a 1 MiB object costs 4 writes, not one per network read.
func TestCopyBufferWritesWholeBuffers(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), (1<<20+100)/16)
	var w writeSizes
	n, err := CopyBuffer(&w, chunked{bytes.NewReader(data), 4 << 10})
	if err != nil || n != int64(len(data)) || !bytes.Equal(w.Bytes(), data) {
		t.Fatalf("CopyBuffer = %d, %v; copied %d bytes, equal %v", n, err, w.Len(), bytes.Equal(w.Bytes(), data))
	}
	want := []int{copyBufSize, copyBufSize, copyBufSize, copyBufSize, len(data) - 4*copyBufSize}
	if len(w.sizes) != len(want) {
		t.Fatalf("writes %v, want %v", w.sizes, want)
	}
	for i := range want {
		if w.sizes[i] != want[i] {
			t.Fatalf("writes %v, want %v", w.sizes, want)
		}
	}
}

// A truncated body's error is the copy's error, not a clean end.
func TestCopyBufferKeepsTheSourcesError(t *testing.T) {
	for _, srcErr := range []error{io.ErrUnexpectedEOF, errors.New("connection reset")} {
		var w writeSizes
		src := io.MultiReader(chunked{bytes.NewReader(make([]byte, 10_000)), 1000}, iotest.ErrReader(srcErr))
		n, err := CopyBuffer(&w, src)
		if !errors.Is(err, srcErr) || n != 10_000 || w.Len() != 10_000 {
			t.Errorf("source failing with %v: CopyBuffer = %d, %v (wrote %d)", srcErr, n, err, w.Len())
		}
	}
}

// chunked reads at most size bytes at a time, as a network body does.
type chunked struct {
	r    io.Reader
	size int
}

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.size)]) }

// A page-cache folio is sized to the write that creates it: FileWriter
// keeps every write to a file at 32 KiB or less, whatever CopyBuffer's
// buffer size, and loses or reorders nothing.
func TestFileWriterSplitsWrites(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), (1<<20+100)/16)
	var w writeSizes
	n, err := CopyBuffer(FileWriter(&w), bytes.NewReader(data))
	if err != nil || n != int64(len(data)) || !bytes.Equal(w.Bytes(), data) {
		t.Fatalf("CopyBuffer(FileWriter) = %d, %v; copied %d bytes, equal %v", n, err, w.Len(), bytes.Equal(w.Bytes(), data))
	}
	if want := (len(data) + fileWriteSize - 1) / fileWriteSize; len(w.sizes) != want {
		t.Errorf("%d writes, want %d", len(w.sizes), want)
	}
	for i, s := range w.sizes {
		if s > 32<<10 {
			t.Fatalf("write %d is %d bytes, want at most 32 KiB", i, s)
		}
	}
}

// A failed write stops the rest of the buffer and reports what was written.
func TestFileWriterStopsAtError(t *testing.T) {
	boom := errors.New("disk full")
	n, err := FileWriter(&failAfter{left: 40 << 10, err: boom}).Write(make([]byte, 100<<10))
	if !errors.Is(err, boom) || n != 40<<10 {
		t.Fatalf("Write = %d, %v; want %d, %v", n, err, 40<<10, boom)
	}
}

// failAfter accepts left bytes, then fails every write.
type failAfter struct {
	left int
	err  error
}

func (f *failAfter) Write(p []byte) (int, error) {
	n := min(len(p), f.left)
	f.left -= n
	if n < len(p) {
		return n, f.err
	}
	return n, nil
}
