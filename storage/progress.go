package storage

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/utils/clock"
)

// Progress counts a transfer and logs it at a steady interval: one JSON line
// per interval is what `kubectl logs` readers (people and tools) want, with
// no line per file.
type Progress struct {
	FilesTotal atomic.Int64
	BytesTotal atomic.Int64
	FilesDone  atomic.Int64 // transferred or skipped
	BytesDone  atomic.Int64 // transferred or skipped
	Moved      atomic.Int64 // bytes transferred in this run
	Objects    atomic.Int64 // objects transferred in this run
	Skipped    atomic.Int64 // objects already complete
	// Verified counts bytes read to compare with what is already at the
	// destination (the skip checks): work done, though nothing moved.
	Verified atomic.Int64

	start time.Time
	clk   clock.WithTicker
}

// NewProgress starts counting now.
func NewProgress(clk clock.WithTicker) *Progress {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Progress{clk: clk, start: clk.Now()}
}

// Elapsed since NewProgress.
func (p *Progress) Elapsed() time.Duration { return p.clk.Since(p.start) }

// Rate is the bytes per second processed so far: moved or read to verify
// a skip. Skipped bytes that were not read do not count, so a rerun that
// skips most files neither shows an inflated rate nor, while it verifies,
// one near zero (which once gave an ETA of 96,609,145 s).
func (p *Progress) Rate() float64 {
	el := p.Elapsed().Seconds()
	if el <= 0 {
		return 0
	}
	return float64(p.Moved.Load()+p.Verified.Load()) / el
}

// ETA is the time the remaining bytes take at Rate, and false while there
// is no rate yet.
func (p *Progress) ETA() (time.Duration, bool) {
	rate := p.Rate()
	done, total := p.BytesDone.Load(), p.BytesTotal.Load()
	if rate <= 0 || total < done {
		return 0, false
	}
	return time.Duration(float64(total-done) / rate * float64(time.Second)), true
}

// Log writes one progress line.
func (p *Progress) Log(log zerolog.Logger, msg string) {
	el := p.Elapsed().Seconds()
	done, total := p.BytesDone.Load(), p.BytesTotal.Load()
	rate := p.Rate()
	ev := log.Info().
		Int64("files", p.FilesDone.Load()).Int64("filesTotal", p.FilesTotal.Load()).
		Int64("bytes", done).Int64("bytesTotal", total).
		Int64("skipped", p.Skipped.Load()).
		Float64("rateMBps", float64(int64(rate/1e4))/100).
		Float64("elapsedSeconds", float64(int64(el*10))/10)
	if eta, ok := p.ETA(); ok {
		ev = ev.Float64("etaSeconds", float64(int64(eta.Seconds()*10))/10)
	}
	ev.Msg(msg)
}

// Run logs every interval until ctx ends.
func (p *Progress) Run(ctx context.Context, log zerolog.Logger, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := p.clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			p.Log(log, "transfer progress")
		}
	}
}

// Attempt counts the bytes one transfer moves, so that each retry first
// takes back what the failed try counted: progress and Moved never count a
// byte twice. It is not safe for concurrent use: one per transfer.
type Attempt struct {
	p *Progress
	n int64
}

// Attempt starts counting one transfer.
func (p *Progress) Attempt() *Attempt { return &Attempt{p: p} }

// Restart takes back what the previous try counted; every try calls it
// first.
func (a *Attempt) Restart() {
	a.p.BytesDone.Add(-a.n)
	a.p.Moved.Add(-a.n)
	a.n = 0
}

// Add counts k bytes moved.
func (a *Attempt) Add(k int64) {
	a.n += k
	a.p.BytesDone.Add(k)
	a.p.Moved.Add(k)
}

// Write counts len(b) bytes, so an Attempt can watch an io.MultiWriter.
func (a *Attempt) Write(b []byte) (int, error) {
	a.Add(int64(len(b)))
	return len(b), nil
}

// Verifying returns a writer that counts what it is given as Verified, to
// add to the io.MultiWriter of a skip check.
func (p *Progress) Verifying() io.Writer { return verifying{p} }

type verifying struct{ p *Progress }

func (v verifying) Write(b []byte) (int, error) {
	v.p.Verified.Add(int64(len(b)))
	return len(b), nil
}
