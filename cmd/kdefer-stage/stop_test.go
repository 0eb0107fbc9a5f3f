//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/s3server"
)

// A transfer that ignores cancellation cannot hold the step past the grace
// period: the outcome is a cancellation, in time to write the summary.
func TestRunUntilStopped(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	deaf := func(context.Context) (storage.TransferResult, error) { select {} }
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	start := time.Now()
	_, err := runUntilStopped(ctx, 300*time.Millisecond, deaf)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want a cancellation", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("returned after %v, want about 400ms", d)
	}
}

const envStopChild = "KDEFER_TEST_STOP_ARGS"

// TestStopChild is the kdefer-stage TestSIGTERM signals; it does nothing on
// its own.
func TestStopChild(t *testing.T) {
	args := os.Getenv(envStopChild)
	if args == "" {
		t.Skip("run by TestSIGTERM")
	}
	os.Exit(run(strings.Split(args, "\n"), os.Stderr))
}

// SIGTERM stops a stage-out stuck on a store that never answers within 2 s,
// exit 1 (transient: the kubelet may rerun it) with the summary written.
func TestSIGTERM(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	connected := make(chan struct{})
	go func() { // accept and never answer
		var once sync.Once
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			once.Do(func() { close(connected) })
			defer c.Close()
		}
	}()
	s3server.SetCredentials(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := filepath.Join(t.TempDir(), "summary.json")
	args := []string{"out", "--from", src, "--to", s3server.S3URL(l.Addr().String(), "bucket", "run/"), "--summary-file", sum, "--log-format", "json"}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestStopChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envStopChild+"="+strings.Join(args, "\n"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The child installs its signal handler before it dials the store, so
	// once it has connected a SIGTERM is its to handle (a fixed sleep was
	// not enough on a loaded machine: the signal came first and killed it).
	select {
	case <-connected:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the stage step never connected to the store\n%s", out.String())
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-waited
	}
	took := time.Since(start)
	t.Logf("stopped %v after SIGTERM", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("stopped %v after SIGTERM, want within 2s", took.Round(time.Millisecond))
	}
	if code := cmd.ProcessState.ExitCode(); code != stagecontract.ExitTransient {
		t.Errorf("exit %d, want %d\n%s", code, stagecontract.ExitTransient, out.String())
	}
	data, err := os.ReadFile(sum)
	if err != nil {
		t.Fatalf("no summary: %v\n%s", err, out.String())
	}
	var s stagecontract.StageSummary
	if err := json.Unmarshal(data, &s); err != nil || s.ErrorClass != "transient" {
		t.Errorf("summary %s (%v), want errorClass transient", data, err)
	}
}
