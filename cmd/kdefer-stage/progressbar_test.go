package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/storage"
)

// On a terminal the bar shows sizes in human units with the engine's file
// counts.
func TestProgressBarHumanUnits(t *testing.T) {
	p := storage.NewProgress(nil)
	p.FilesTotal.Store(40)
	p.FilesDone.Store(12)
	p.BytesTotal.Store(3 << 30)
	p.BytesDone.Store(1 << 30)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*barInterval)
	defer cancel()
	progressBar(&out, "out")(ctx, p)
	s := out.String()
	for _, want := range []string{"out 12/40 files", "GB", "\r"} {
		if !strings.Contains(s, want) {
			t.Errorf("bar output %q lacks %q", s, want)
		}
	}
}

// Off a terminal (a pod's log, a pipe) the output stays plain log lines,
// progress included, console format or not: no bar, no carriage return.
func TestProgressOffTerminalIsLogLines(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"console", "json", "auto"} {
		var stderr bytes.Buffer
		code := run([]string{"out", "--from", src, "--to", "file://" + t.TempDir(), "--summary-file", "-",
			"--log-format", format, "--progress-interval", "1ms"}, &stderr)
		out := stderr.String()
		if code != 0 || strings.ContainsAny(out, "\r█") || !strings.Contains(out, "report final progress") {
			t.Errorf("--log-format %s: exit %d, output:\n%q", format, code, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.Contains(line, "\"level\"") && !strings.Contains(line, "INF") && !strings.Contains(line, "WRN") {
				t.Errorf("--log-format %s: line %q is not a log line", format, line)
			}
		}
	}
}
