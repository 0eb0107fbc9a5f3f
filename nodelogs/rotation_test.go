package nodelogs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// run runs s until the test ends; it returns once s watches.
func run(t *testing.T, s *Spool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, "Run to watch", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.w != nil
	})
}

// rotation plays the kubelet's rotation of a container's live file.
type rotation struct {
	t    *testing.T
	c    *container
	live string
	at   time.Time
	old  []string // rotated names, oldest first, compressed but the last
}

// rotate renames the live file as the kubelet does; the runtime writes to
// it once more (it has not reopened yet), then reopens a new live file.
func (r *rotation) rotate() {
	r.t.Helper()
	r.at = r.at.Add(10 * time.Second)
	name := r.live + "." + r.at.Format("20060102-150405")
	if err := os.Rename(filepath.Join(r.c.dir, r.live), filepath.Join(r.c.dir, name)); err != nil {
		r.t.Fatal(err)
	}
	r.c.line("stderr", "F", "written after the rename, before the reopen")
	r.c.open(r.live)
	r.old = append(r.old, name)
}

// compress gzips (pretends to) every rotated file but the last, then
// deletes the oldest beyond keep, as the kubelet does.
func (r *rotation) compress(keep int) {
	r.t.Helper()
	for i, name := range r.old[:len(r.old)-1] {
		path := filepath.Join(r.c.dir, name)
		if strings.HasSuffix(name, ".gz") {
			continue
		}
		if err := os.WriteFile(path+".gz.tmp", []byte("gzip"), 0o640); err != nil {
			r.t.Fatal(err)
		}
		if err := os.Rename(path+".gz.tmp", path+".gz"); err != nil {
			r.t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			r.t.Fatal(err)
		}
		r.old[i] = name + ".gz"
	}
	for len(r.old) > keep {
		if err := os.Remove(filepath.Join(r.c.dir, r.old[0])); err != nil {
			r.t.Fatal(err)
		}
		r.old = r.old[1:]
	}
}

// Rotated, compressed and deleted by the kubelet: the spool has every
// generation once, in order.
func TestRotation(t *testing.T) {
	s := newSpool(t, 50*time.Millisecond)
	p := testPod("p")
	s.Keep(p)
	run(t, s)
	c := newContainer(t, s, p)
	c.open("0.log")
	c.line("stdout", "F", "generation 0")
	waitLinks(t, s, p, 1)
	r := &rotation{t: t, c: c, live: "0.log", at: time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC)}
	for gen := 1; gen <= 3; gen++ {
		c.line("stdout", "P", fmt.Sprintf("end of generation %d, ", gen-1))
		r.rotate()
		c.line("stdout", "F", fmt.Sprintf("generation %d", gen))
		// Linked once: the rotated file is the inode already linked.
		waitLinks(t, s, p, gen+1)
		r.compress(2)
		time.Sleep(60 * time.Millisecond) // a resync in between
		waitLinks(t, s, p, gen+1)
	}
	c.close()
	checkLog(t, s, p, mainLog, c.take())
}

// 20 MiB through many rotations, long lines split by the runtime included.
func TestRotationLarge(t *testing.T) {
	const total, maxSize, split = 20 << 20, 512 << 10, 16 << 10
	s := newSpool(t, 50*time.Millisecond)
	p := testPod("p")
	s.Keep(p)
	run(t, s)
	c := newContainer(t, s, p)
	c.open("0.log")
	waitLinks(t, s, p, 1)
	r := &rotation{t: t, c: c, live: "0.log", at: time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC)}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 \t.,;:!?"
	pool := make([]byte, 1<<20)
	for i := range pool {
		pool[i] = alphabet[rng.IntN(len(alphabet))]
	}
	text := func(n int) string {
		off := rng.IntN(len(pool) - n)
		return string(pool[off : off+n])
	}
	written, size, gens := 0, 0, 1
	for written < total {
		stream := []string{"stdout", "stderr"}[rng.IntN(2)]
		n := rng.IntN(3000)
		if rng.IntN(100) == 0 {
			n = 40 << 10
		}
		line := text(n)
		// The runtime splits a long line into partial lines.
		for len(line) > split {
			c.line(stream, "P", line[:split])
			line = line[split:]
			size += split + 40
		}
		tag := "F"
		if rng.IntN(5) == 0 {
			tag = "P"
		}
		c.line(stream, tag, line)
		size += len(line) + 40
		written += n
		if size > maxSize {
			r.rotate()
			gens++
			waitLinks(t, s, p, gens)
			r.compress(5)
			size = 0
		}
	}
	c.close()
	if gens < 30 {
		t.Fatalf("only %d generations", gens)
	}
	checkLog(t, s, p, mainLog, c.take())
	if _, bytes := s.Usage(); bytes < total {
		t.Fatalf("Usage: %d bytes, want over %d", bytes, total)
	}
}

// Rotations as fast as the test can make them while the spool rescans:
// a rename between a listing and a link must not reorder generations.
func TestRotationWhileScanning(t *testing.T) {
	s := newSpool(t, time.Hour)
	p := testPod("p")
	c := newContainer(t, s, p)
	c.open("0.log")
	s.Keep(p)
	r := &rotation{t: t, c: c, live: "0.log", at: time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC)}
	stop := make(chan struct{})
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		for {
			select {
			case <-stop:
				return
			default:
				s.Keep(p) // a rescan
			}
		}
	}()
	for gen := range 300 {
		c.line("stdout", "F", fmt.Sprintf("generation %d", gen))
		r.rotate()
	}
	close(stop)
	<-scanned
	c.close()
	checkLog(t, s, p, mainLog, c.take())
}
