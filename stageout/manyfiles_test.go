package stageout_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/storage"
)

// discardBackend stores nothing: it reads what it is given and counts it,
// so a test measures the engine's memory, not a store's.
type discardBackend struct {
	storage.Backend
	puts, manifestBytes atomic.Int64
}

func (d *discardBackend) Put(_ context.Context, key string, src io.ReaderAt, size int64, _ storage.PutOptions) (uint32, error) {
	n, err := io.Copy(io.Discard, io.NewSectionReader(src, 0, size))
	if err != nil {
		return 0, err
	}
	d.puts.Add(1)
	d.manifestBytes.Store(n) // the manifest is the last Put
	return 0, nil
}

func (d *discardBackend) List(context.Context, string, func(storage.ObjectInfo) error) error {
	return nil
}

// TestManyFilesMemory stages out KDEFER_TEST_MANY_FILES empty files (say
// 1000000; skipped when unset: creating them takes minutes) and reports the
// peak Go heap: the file list and the manifest are spilled to disk, so it
// stays flat however many files there are.
func TestManyFilesMemory(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KDEFER_TEST_MANY_FILES"))
	if n == 0 {
		t.Skip("set KDEFER_TEST_MANY_FILES to the number of files")
	}
	src := t.TempDir()
	for d := 0; d*1000 < n; d++ {
		dir := filepath.Join(src, fmt.Sprintf("d%04d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := d * 1000; i < min(n, (d+1)*1000); i++ {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%07d.dat", i)))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // peak of the live heap plus what is not yet swept
		defer close(sampled)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	be := &discardBackend{}
	start := time.Now()
	res, err := stageout.Run(context.Background(), outOpts(be, src, "mem://many/run/"))
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	peakMiB := float64(peak.Load()) / (1 << 20)
	t.Logf("RESULT files=%d objects=%d seconds=%.1f manifest_mib=%.1f peak_heap_mib=%.1f",
		n, res.Objects, time.Since(start).Seconds(), float64(be.manifestBytes.Load())/(1<<20), peakMiB)
	if res.Objects != int64(n) {
		t.Errorf("stored %d objects, want %d", res.Objects, n)
	}
	if peakMiB > 64 {
		t.Errorf("peak heap %.0f MiB for %d files, want at most 64 MiB", peakMiB, n)
	}
}
