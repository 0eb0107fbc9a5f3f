package stageout

import (
	"io"

	"github.com/kdefer/kdefer/stagecontract"
)

// logKeeper is an io.Writer that keeps what a stage-out stores of one log:
// all of it up to max bytes; past that, its first max/4 bytes (the head: a
// pod's start says what it was doing) and its last max-max/4 (the tail: its
// end says why it ended). It holds at most max bytes whatever the log's
// length, the tail in a ring, so a 200 MiB log costs the cap, not 200 MiB.
// A max <= 0 keeps everything.
type logKeeper struct {
	max              int64
	headMax, tailMax int
	head             []byte
	ring             []byte // the tail; once full, its oldest byte is at pos
	pos              int
	total            int64 // bytes written
}

func newLogKeeper(max int64) *logKeeper {
	k := &logKeeper{max: max}
	if max > 0 {
		k.headMax = int(max / 4)
		k.tailMax = int(max) - k.headMax
	}
	return k
}

func (k *logKeeper) Write(p []byte) (int, error) {
	n := len(p)
	k.total += int64(n)
	if k.max <= 0 {
		k.head = append(k.head, p...)
		return n, nil
	}
	if room := k.headMax - len(k.head); room > 0 {
		c := min(room, len(p))
		k.head = append(grow(k.head, c, k.headMax), p[:c]...)
		p = p[c:]
	}
	if len(p) >= k.tailMax {
		// p alone fills the ring: keep its end, oldest byte first.
		k.ring = append(grow(k.ring[:0], k.tailMax, k.tailMax), p[len(p)-k.tailMax:]...)
		k.pos = 0
		return n, nil
	}
	if room := k.tailMax - len(k.ring); room > 0 {
		c := min(room, len(p))
		k.ring = append(grow(k.ring, c, k.tailMax), p[:c]...)
		p = p[c:]
	}
	for len(p) > 0 { // the ring is full: overwrite its oldest bytes
		c := copy(k.ring[k.pos:], p)
		p = p[c:]
		k.pos = (k.pos + c) % k.tailMax
	}
	return n, nil
}

// grow returns b with room for need more bytes, its capacity at most limit:
// append's own growth would overshoot the cap by up to a quarter.
func grow(b []byte, need, limit int) []byte {
	if cap(b)-len(b) >= need {
		return b
	}
	nb := make([]byte, len(b), min(limit, max(len(b)+need, 2*cap(b))))
	copy(nb, b)
	return nb
}

// kept returns the object to store, as segments in order, and, when bytes
// were left out, the manifest's record of it: head, marker line, tail.
func (k *logKeeper) kept() ([][]byte, *stagecontract.LogTruncation) {
	tail := [][]byte{k.ring[k.pos:], k.ring[:k.pos]}
	if k.max <= 0 || k.total <= k.max {
		return append([][]byte{k.head}, tail...), nil
	}
	return cutLog(k.head, tail, k.total, k.max)
}

// cutLog is the object of a log of total bytes cut to head and tail under
// the cap max, and its manifest record.
func cutLog(head []byte, tail [][]byte, total, max int64) ([][]byte, *stagecontract.LogTruncation) {
	t := &stagecontract.LogTruncation{OriginalSize: total, HeadBytes: int64(len(head))}
	for _, s := range tail {
		t.TailBytes += int64(len(s))
	}
	marker := []byte(stagecontract.LogTruncationMarker(t.OmittedBytes(), max))
	return append([][]byte{head, marker}, tail...), t
}

// segments is an io.ReaderAt over byte slices joined, so a log is stored
// (and re-read on a retry) without joining them in memory.
type segments [][]byte

func (s segments) size() int64 {
	var n int64
	for _, b := range s {
		n += int64(len(b))
	}
	return n
}

func (s segments) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for _, b := range s {
		if off >= int64(len(b)) {
			off -= int64(len(b))
			continue
		}
		c := copy(p[n:], b[off:])
		n += c
		off = 0
		if n == len(p) {
			return n, nil
		}
	}
	return n, io.EOF
}
