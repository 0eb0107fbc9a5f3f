package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/kdefer/kdefer/storage"
)

// barInterval is how often the terminal bar is redrawn.
const barInterval = 200 * time.Millisecond

// progressBar returns a storage.TransferOptions.Watch that draws a bar with
// human units on w, a terminal (schollz/progressbar: bytes in kB/MB/GB). The
// rate and ETA in its description are the engine's (storage.Progress: over
// bytes processed, skipped bytes not read excluded), not the bar's own,
// which would count skipped files as instant bytes. Off a terminal the
// engines log plain progress lines instead: logs and `kubectl logs` get no
// control characters.
func progressBar(w io.Writer, op string) func(ctx context.Context, p *storage.Progress) {
	return func(ctx context.Context, p *storage.Progress) {
		bar := progressbar.NewOptions64(max(p.BytesTotal.Load(), 1),
			progressbar.OptionSetWriter(w),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowTotalBytes(true),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(barInterval),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetDescription(op))
		t := time.NewTicker(barInterval)
		defer t.Stop()
		for {
			drawBar(bar, p, op)
			select {
			case <-ctx.Done():
				_ = bar.Clear() // the final progress line follows
				return
			case <-t.C:
			}
		}
	}
}

// drawBar updates bar from p.
func drawBar(bar *progressbar.ProgressBar, p *storage.Progress, op string) {
	bar.ChangeMax64(max(p.BytesTotal.Load(), 1))
	desc := fmt.Sprintf("%s %d/%d files", op, p.FilesDone.Load(), p.FilesTotal.Load())
	if rate := p.Rate(); rate > 0 {
		desc += fmt.Sprintf(" %.1f MB/s", rate/1e6)
	}
	if eta, ok := p.ETA(); ok {
		desc += " ETA " + eta.Round(time.Second).String()
	}
	bar.Describe(desc)
	_ = bar.Set64(p.BytesDone.Load())
}
