package stageout_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// genLineLen is the length of every line genLog writes: an 8-digit line
// number, a space, 'x's, a newline. Numbered lines make a head or tail
// taken from the wrong place differ from the expected bytes.
const genLineLen = 4096

// genLog is a log of size bytes made up as it is read: a 200 MiB log costs
// one line of memory, so the test measures the stage-out's memory alone.
type genLog struct {
	off, size int64
	line      int64 // the line in buf
	buf       []byte
}

func newGenLog(size int64) *genLog {
	buf := bytes.Repeat([]byte{'x'}, genLineLen)
	buf[8], buf[genLineLen-1] = ' ', '\n'
	g := &genLog{size: size, line: -1, buf: buf}
	return g
}

func (g *genLog) Read(p []byte) (int, error) {
	if g.off >= g.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && g.off < g.size {
		if l := g.off / genLineLen; l != g.line {
			g.line = l
			for d := 7; d >= 0; d-- {
				g.buf[d] = '0' + byte(l%10)
				l /= 10
			}
		}
		c := copy(p[n:], g.buf[g.off%genLineLen:min(genLineLen, g.off%genLineLen+g.size-g.off)])
		n += c
		g.off += int64(c)
	}
	return n, nil
}

func (g *genLog) Close() error { return nil }

// genBytes is n bytes of a genLog from off.
func genBytes(size, off, n int64) []byte {
	g := newGenLog(size)
	g.off = off
	b := make([]byte, n)
	if _, err := io.ReadFull(g, b); err != nil {
		panic(fmt.Sprintf("genBytes(%d, %d, %d): %v", size, off, n, err))
	}
	return b
}

// genSource is a LogSource of pod p-0's container main, a genLog of size
// bytes; onRead, when set, is called with the bytes served so far after
// each read.
type genSource struct {
	size   int64
	onRead func(served int64)
}

func (s *genSource) Index(context.Context) (stagecontract.LogsIndex, error) {
	return stagecontract.LogsIndex{Pod: "p-0", Logs: []stagecontract.LogRef{{Container: "main"}}}, nil
}

func (s *genSource) Open(context.Context, stagecontract.LogRef) (io.ReadCloser, error) {
	g := newGenLog(s.size)
	if s.onRead == nil {
		return g, nil
	}
	return &watchedLog{g, s.onRead}, nil
}

type watchedLog struct {
	*genLog
	onRead func(int64)
}

func (w *watchedLog) Read(p []byte) (int, error) {
	n, err := w.genLog.Read(p)
	w.onRead(w.off)
	return n, err
}

// stageOutLog runs a stage-out of an empty tree whose pod has one log from
// src, capped at maxBytes, and returns its manifest entry, as stored, and
// the stored object.
func stageOutLog(t *testing.T, src stageout.LogSource, maxBytes int64) (stagecontract.ManifestFile, []byte) {
	t.Helper()
	u := storagetest.File(t).URL(t)
	be, loc := storagetest.Open(t, u)
	dir := t.TempDir()
	stagetest.MakeTree(t, dir, stagetest.Tree{"out.txt": []byte("result")})
	o := outOpts(be, dir, u)
	o.Logs = stageout.Logs{Source: src, MaxBytes: maxBytes}
	if _, err := stageout.Run(context.Background(), o); err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	m, err := storage.ReadManifest(context.Background(), be, loc.Prefix+stagecontract.ManifestKey, storage.DefaultRetry())
	if err != nil {
		t.Fatal(err)
	}
	key := stagecontract.LogKey("p-0", stagecontract.LogRef{Container: "main"})
	if len(m.Logs) != 1 || m.Logs[0].Key != key || len(m.LogWarnings) != 0 {
		t.Fatalf("manifest logs %+v, warnings %+v: want %s alone", m.Logs, m.LogWarnings, key)
	}
	data := storagetest.Read(t, be, loc.Prefix+key, 0, -1)
	if l := m.Logs[0]; l.Size != int64(len(data)) || l.Checksum != storage.FormatChecksum(storagetest.CRC(data)) {
		t.Errorf("manifest size %d checksum %s, stored %d bytes %s", l.Size, l.Checksum, len(data), storage.FormatChecksum(storagetest.CRC(data)))
	}
	return m.Logs[0], data
}

// wantCut checks that a log of size bytes capped at maxBytes is stored as
// its first maxBytes/4 bytes, the marker, and its last bytes up to the cap,
// and that its manifest entry says so.
func wantCut(t *testing.T, l stagecontract.ManifestFile, data []byte, size, maxBytes int64) {
	t.Helper()
	head, tail := maxBytes/4, maxBytes-maxBytes/4
	want := stagecontract.LogTruncation{OriginalSize: size, HeadBytes: head, TailBytes: tail}
	if l.Truncated == nil || *l.Truncated != want {
		t.Fatalf("manifest truncated = %+v, want %+v", l.Truncated, want)
	}
	marker := stagecontract.LogTruncationMarker(size-maxBytes, maxBytes)
	exp := append(append(genBytes(size, 0, head), marker...), genBytes(size, size-tail, tail)...)
	if !bytes.Equal(data, exp) {
		i := 0
		for i < min(len(data), len(exp)) && data[i] == exp[i] {
			i++
		}
		t.Fatalf("stored %d bytes, want %d (head %d + marker %q + tail %d): first difference at byte %d",
			len(data), len(exp), head, marker, tail, i)
	}
}

// A 200 MiB log (a container whose log the kubelet rotated twenty times at
// 10Mi) capped at the default 10Mi: the object is its first 2.5 MiB, the
// marker line, its last 7.5 MiB, byte for byte, and the manifest entry
// says how long the log was and which bytes the object holds.
func TestStageOutBigLogKeepsHeadAndTail(t *testing.T) {
	const size, maxBytes = 200 << 20, 10 << 20
	l, data := stageOutLog(t, &genSource{size: size}, maxBytes)
	wantCut(t, l, data, size, maxBytes)
}

// At the cap a log is stored whole and its entry says nothing more; one
// byte over, it is cut and the marker says one byte is left out. A cap
// under 4 keeps no head.
func TestStageOutLogAtTheCap(t *testing.T) {
	for _, c := range []struct{ size, maxBytes int64 }{{1000, 1000}, {1001, 1000}, {999, 1000}, {2, 1}, {0, 10}} {
		t.Run(fmt.Sprintf("%d-of-%d", c.size, c.maxBytes), func(t *testing.T) {
			l, data := stageOutLog(t, &genSource{size: c.size}, c.maxBytes)
			if c.size > c.maxBytes {
				wantCut(t, l, data, c.size, c.maxBytes)
				return
			}
			if l.Truncated != nil || !bytes.Equal(data, genBytes(c.size, 0, c.size)) {
				t.Errorf("stored %d bytes (truncated %+v), want the whole %d-byte log", len(data), l.Truncated, c.size)
			}
		})
	}
}

// The stage step holds one log's cap, not the log: while a 200 MiB log
// streams through at the default cap, the live heap (measured after a
// forced GC every 16 MiB) grows by less than 2 caps, and the heap, garbage
// included, never by more than 6 (sampled every 5 ms). The bounds are loose
// on purpose (the cap itself is 1, and the garbage collector's pacing is
// not the test's business): they fail a stage step that holds the whole
// log, or anything near it, and, the live one, a step that holds twice the
// cap as the tail-only reader did.
func TestStageOutBigLogMemory(t *testing.T) {
	const size, maxBytes = 200 << 20, 10 << 20
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var live, peak uint64
	var mu sync.Mutex
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			mu.Lock()
			peak = max(peak, ms.HeapAlloc)
			mu.Unlock()
		}
	}()
	next := int64(16 << 20)
	src := &genSource{size: size, onRead: func(served int64) {
		if served < next {
			return
		}
		next += 16 << 20
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		mu.Lock()
		live = max(live, ms.HeapAlloc)
		mu.Unlock()
	}}
	l, _ := stageOutLog(t, src, maxBytes)
	close(stop)
	<-sampled
	if l.Truncated == nil {
		t.Fatal("the 200 MiB log was not cut")
	}
	growth := func(v uint64) int64 { return int64(v) - int64(base) }
	t.Logf("heap before %d MiB; live growth at most %d MiB, heap growth at most %d MiB (cap %d MiB)",
		base>>20, growth(live)>>20, growth(peak)>>20, maxBytes>>20)
	if growth(live) >= 2*maxBytes {
		t.Errorf("live heap grew by %d bytes while streaming the log: want under 2 caps (%d)", growth(live), 2*maxBytes)
	}
	if growth(peak) >= 6*maxBytes {
		t.Errorf("heap grew by %d bytes: want under 6 caps (%d)", growth(peak), 6*maxBytes)
	}
}

// The step's own log keeps its tail, where its warnings and outcome are;
// cut, it starts with the marker and its entry says so, head 0.
func TestStageOutSelfLogCut(t *testing.T) {
	u := storagetest.File(t).URL(t)
	be, loc := storagetest.Open(t, u)
	dir := t.TempDir()
	stagetest.MakeTree(t, dir, stagetest.Tree{"out.txt": []byte("result")})
	self := &stageout.SelfLog{Pod: "p-0-defer", Container: "stage-out", Tail: stageout.NewTailWriter(64)}
	var all []byte
	for i := range 20 {
		line := fmt.Sprintf("step line %02d\n", i)
		all = append(all, line...)
		_, _ = io.WriteString(self.Tail, line)
	}
	o := outOpts(be, dir, u)
	o.Logs = stageout.Logs{Self: self}
	res, err := stageout.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	if len(res.Manifest.Logs) != 1 {
		t.Fatalf("manifest logs %+v, want the step's", res.Manifest.Logs)
	}
	l := res.Manifest.Logs[0]
	want := stagecontract.LogTruncation{OriginalSize: int64(len(all)), TailBytes: 64}
	if l.Truncated == nil || *l.Truncated != want {
		t.Errorf("truncated = %+v, want %+v", l.Truncated, want)
	}
	got := storagetest.Read(t, be, loc.Prefix+l.Key, 0, -1)
	if exp := stagecontract.LogTruncationMarker(int64(len(all))-64, 64) + string(all[len(all)-64:]); string(got) != exp || l.Size != int64(len(exp)) {
		t.Errorf("stored %q (size %d), want %q", got, l.Size, exp)
	}
}
