package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	clocktesting "k8s.io/utils/clock/testing"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func TestProgressLines(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	p := NewProgress(clk)
	p.FilesTotal.Store(10)
	p.BytesTotal.Store(100e6)
	var buf lockedBuf
	log := zerolog.New(&buf)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, log, 10*time.Second); close(done) }()
	for !clk.HasWaiters() {
		runtime.Gosched() // wait for the ticker to be armed
	}
	p.FilesDone.Store(4)
	p.BytesDone.Store(40e6)
	p.Moved.Store(40e6)
	clk.Step(10 * time.Second)
	for !strings.Contains(buf.String(), "\n") {
		runtime.Gosched() // wait for the line the tick produces
	}
	cancel()
	<-done
	var got map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(buf.String(), "\n", 2)[0]), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"level": "info", "message": "transfer progress", "files": 4.0, "filesTotal": 10.0, "bytes": 40e6, "bytesTotal": 100e6,
		"skipped": 0.0, "rateMBps": 4.0, "elapsedSeconds": 10.0, "etaSeconds": 15.0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("progress line (-want +got):\n%s", diff)
	}
}

// A rerun that verifies files already at the destination moves almost
// nothing: rate and ETA come from the bytes it reads, not from the few it
// moved (before, this gave an ETA of 600,000 s instead of 15 s).
func TestProgressRateCountsVerifiedBytes(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	p := NewProgress(clk)
	p.BytesTotal.Store(100e6)
	clk.Step(10 * time.Second)
	p.Moved.Store(1000)
	p.Verified.Store(40e6 - 1000)
	p.BytesDone.Store(40e6) // the verified files, skipped
	var buf lockedBuf
	p.Log(zerolog.New(&buf), "transfer progress")
	var got map[string]any
	if err := json.Unmarshal([]byte(buf.String()), &got); err != nil {
		t.Fatal(err)
	}
	if got["rateMBps"] != 4.0 || got["etaSeconds"] != 15.0 {
		t.Errorf("verifying skipped files: rateMBps %v etaSeconds %v, want 4 and 15", got["rateMBps"], got["etaSeconds"])
	}
}

// A retried transfer must not count the failed try's bytes twice.
func TestAttemptRestart(t *testing.T) {
	p := NewProgress(nil)
	a := p.Attempt()
	a.Restart()
	a.Add(10)
	if _, err := a.Write(make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	a.Restart() // the try failed after 15 bytes
	a.Add(20)
	if done, moved := p.BytesDone.Load(), p.Moved.Load(); done != 20 || moved != 20 {
		t.Errorf("after a retry: bytesDone %d moved %d, want 20 and 20", done, moved)
	}
}
