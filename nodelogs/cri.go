package nodelogs

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// criBufSize bounds what the decoder holds of one line: the runtime splits
// lines at 16 KiB, but a longer one is streamed through in pieces of this
// size rather than held whole.
const criBufSize = 64 << 10

// NewCRIReader decodes a CRI log file (TIMESTAMP STREAM TAGS CONTENT per
// line) into what the container wrote, as kubectl logs shows it: each
// line's CONTENT, followed by a newline unless the line is partial (first
// tag P). stdout and stderr stay interleaved as written.
func NewCRIReader(r io.Reader) io.Reader {
	return &criReader{br: bufio.NewReaderSize(r, criBufSize)}
}

type criReader struct {
	br      *bufio.Reader
	out     []byte // decoded bytes not yet returned; may point into br's buffer
	newline bool   // a newline follows out: the line was full
	inLine  bool   // the next piece read continues a line already started
	full    bool   // the line being read is full (F) or malformed
	err     error  // the error after out and newline are returned
}

var newline = []byte{'\n'}

func (c *criReader) Read(p []byte) (int, error) {
	for {
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			return n, nil
		}
		if c.newline {
			c.newline = false
			c.out = newline
			continue
		}
		if c.err != nil {
			return 0, c.err
		}
		c.next()
	}
}

// next reads one piece: a whole line, or, of a line longer than the
// buffer, the buffer's worth. out is only replaced once it is returned,
// as it points into br's buffer.
func (c *criReader) next() {
	piece, err := c.br.ReadSlice('\n')
	ends := err == nil
	switch {
	case err == nil:
		piece = piece[:len(piece)-1]
	case errors.Is(err, bufio.ErrBufferFull):
	default:
		c.err = err
		if len(piece) == 0 && !c.inLine {
			return
		}
		// A last line without its newline (the file read mid-write) ends
		// here: its content is given, never dropped.
		ends = true
	}
	if !c.inLine {
		content, full, ok := parseCRI(piece)
		if ok {
			piece = content
		}
		// A malformed line is passed through as is, with a newline: its
		// bytes are the only record of what was written, and guessing a
		// format would lose them.
		c.full = full || !ok
	}
	c.out = piece
	c.inLine = !ends
	if ends {
		c.newline = c.full
	}
}

// parseCRI splits a line's start into its content and whether it is full.
// ok is false for a line with fewer than three spaces.
func parseCRI(line []byte) (content []byte, full, ok bool) {
	rest := line
	var tags []byte
	for i := range 3 {
		sp := bytes.IndexByte(rest, ' ')
		if sp < 0 {
			return nil, false, false
		}
		if i == 2 {
			tags = rest[:sp]
		}
		rest = rest[sp+1:]
	}
	// Tags may grow (F:x); the first, before ':', says partial or full.
	first, _, _ := bytes.Cut(tags, []byte(":"))
	return rest, !bytes.Equal(first, []byte("P")), true
}
