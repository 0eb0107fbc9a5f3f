package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kdefer/kdefer/test/s3server"
)

// TestPeakRSS runs the real binary as a child process against MinIO, up and
// down, with many small files and a few large ones, and holds it to the
// 128 MiB peak RSS budget at the default concurrency.
func TestPeakRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and moves ~600 MiB")
	}
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "rss")
	dir := t.TempDir()
	bin := filepath.Join(dir, "kdefer-stage")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	src := filepath.Join(dir, "src")
	chunk := make([]byte, 1<<20)
	if _, err := rand.Read(chunk); err != nil {
		t.Fatal(err)
	}
	write := func(name string, mib int) {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		for range mib {
			if _, err := f.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
	}
	for i := range 300 {
		write(fmt.Sprintf("small/d%d/f%d", i%10, i), 1)
	}
	for i := range 2 {
		write(fmt.Sprintf("large/f%d", i), 150)
	}
	for _, args := range [][]string{
		{"out", "--from", src, "--to", srv.URL("rss", "run/")},
		{"in", "--from", srv.URL("rss", "run/") + "", "--to", filepath.Join(dir, "dst")},
	} {
		cmd := exec.Command(bin, append(args, "--summary-file", "-", "--progress-interval", "-1s")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s", args[0], err, stderr.String())
		}
		// An upper bound: the child's ru_maxrss also covers this test
		// process's RSS at exec (vfork), which stays far below the budget.
		rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss >> 10
		t.Logf("%s: peak RSS %d MiB", args[0], rss)
		if rss > 128 {
			t.Errorf("%s: peak RSS %d MiB, budget 128 MiB", args[0], rss)
		}
	}
}
