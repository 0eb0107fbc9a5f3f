package stageout

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// spill is an append-only list of records kept in an unlinked temporary
// file, so that a tree of a million files costs disk, not memory: the walk
// spills the files it chose, the uploads spill the manifest entries.
// Where no temporary file can be made (a read-only root filesystem without
// a writable TMPDIR) it falls back to memory, and says so once.
type spill struct {
	f   *os.File
	mem bytes.Buffer
	w   *bufio.Writer
	n   int
	buf []byte
}

func newSpill(warn func(error)) *spill {
	s := &spill{}
	f, err := os.CreateTemp("", "kdefer-stage-*")
	if err != nil {
		warn(err)
		s.w = bufio.NewWriter(&s.mem)
		return s
	}
	_ = os.Remove(f.Name()) // unlinked: gone with the process, whatever happens
	s.f, s.w = f, bufio.NewWriterSize(f, 64<<10)
	return s
}

// add appends one record.
func (s *spill) add(rec []byte) error {
	s.buf = binary.AppendUvarint(s.buf[:0], uint64(len(rec)))
	if _, err := s.w.Write(s.buf); err != nil {
		return fmt.Errorf("spill to a temporary file: %w", err)
	}
	if _, err := s.w.Write(rec); err != nil {
		return fmt.Errorf("spill to a temporary file: %w", err)
	}
	s.n++
	return nil
}

// each calls fn with every record, in the order added; rec is only valid
// during the call. Nothing may be added meanwhile.
func (s *spill) each(fn func(rec []byte) error) error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("spill to a temporary file: %w", err)
	}
	var r *bufio.Reader
	if s.f != nil {
		r = bufio.NewReaderSize(io.NewSectionReader(s.f, 0, 1<<62), 64<<10)
	} else {
		r = bufio.NewReader(bytes.NewReader(s.mem.Bytes()))
	}
	var rec []byte
	for {
		n, err := binary.ReadUvarint(r)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read back the temporary file: %w", err)
		}
		if uint64(cap(rec)) < n {
			rec = make([]byte, n)
		}
		rec = rec[:n]
		if _, err := io.ReadFull(r, rec); err != nil {
			return fmt.Errorf("read back the temporary file: %w", err)
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
}

func (s *spill) close() {
	if s.f != nil {
		_ = s.f.Close()
	}
}

// fileRecord encodes what the walk learned of a file; the key is derived
// again from the name when it is read back.
func fileRecord(f file) []byte {
	b := binary.AppendVarint(nil, f.size)
	b = binary.AppendVarint(b, f.mtime.UnixNano())
	return append(b, f.rel...)
}

func parseFileRecord(rec []byte) (file, error) {
	size, n := binary.Varint(rec)
	if n <= 0 {
		return file{}, errors.New("read back the temporary file: bad record")
	}
	mtime, m := binary.Varint(rec[n:])
	if m <= 0 {
		return file{}, errors.New("read back the temporary file: bad record")
	}
	return file{rel: string(rec[n+m:]), size: size, mtime: time.Unix(0, mtime)}, nil
}
