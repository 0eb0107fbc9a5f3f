package stageout

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/kdefer/kdefer/stagecontract"
)

// Whatever sizes the log arrives in (a write that straddles the head's
// end, fills the ring, wraps around it, or is longer than the ring), the
// keeper holds the log's first max/4 bytes and its last max-max/4, and
// never more than max.
func TestLogKeeperWrites(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		capB := int64(1 + r.IntN(64))
		log := make([]byte, r.IntN(300))
		for i := range log {
			log[i] = byte('a' + r.IntN(26))
		}
		k := newLogKeeper(capB)
		for rest := log; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(int(capB)+8))
			if _, err := k.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if held := int64(cap(k.head) + cap(k.ring)); held > capB {
			t.Fatalf("max %d: keeper holds %d bytes", capB, held)
		}
		data, cut := k.kept()
		got := bytes.Join(data, nil)
		want := log
		if int64(len(log)) > capB {
			head, tail := capB/4, capB-capB/4
			want = append(append(bytes.Clone(log[:head]), stagecontract.LogTruncationMarker(int64(len(log))-capB, capB)...), log[int64(len(log))-tail:]...)
			if cut == nil || *cut != (stagecontract.LogTruncation{OriginalSize: int64(len(log)), HeadBytes: head, TailBytes: tail}) {
				t.Fatalf("max %d, log %d bytes: truncation %+v", capB, len(log), cut)
			}
		} else if cut != nil {
			t.Fatalf("max %d, log %d bytes: cut %+v, want whole", capB, len(log), cut)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("max %d, log %q: kept %q, want %q", capB, log, got, want)
		}
		for off := range int64(len(got)) { // as a retried Put re-reads it
			b := make([]byte, min(7, int64(len(got))-off))
			if n, err := segments(data).ReadAt(b, off); n != len(b) || (err != nil && n < len(b)) || !bytes.Equal(b, got[off:off+int64(n)]) {
				t.Fatalf("ReadAt(%d bytes at %d) = %d %v %q, want %q", len(b), off, n, err, b[:n], got[off:off+int64(len(b))])
			}
		}
	}
}

// No cap keeps everything.
func TestLogKeeperUncapped(t *testing.T) {
	k := newLogKeeper(0)
	_, _ = k.Write([]byte("abc"))
	_, _ = k.Write([]byte("def"))
	if data, cut := k.kept(); string(bytes.Join(data, nil)) != "abcdef" || cut != nil {
		t.Errorf("kept %q, cut %+v", bytes.Join(data, nil), cut)
	}
}
