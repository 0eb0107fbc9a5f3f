package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// Signalled, the step writes its summary and exits transient within 2 s,
// even when the transfer is stuck in something that ignores cancellation.
func TestStepStopsOnSignal(t *testing.T) {
	sum := filepath.Join(t.TempDir(), "summary.json")
	var stderr bytes.Buffer
	o := &options{stderr: &stderr, summaryFile: sum, logFormat: "json", code: stagecontract.ExitOK}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := "file:///nowhere"
	var to storage.TransferOptions
	started := make(chan struct{})
	cmd := o.command(ctx, step{cmd: &cobra.Command{Use: "in"}, op: "in", urlFlag: "--from", url: &url, transfer: &to,
		run: func(context.Context) (storage.TransferResult, error) {
			close(started)
			select {} // stuck for good
		}})
	done := make(chan error, 1)
	go func() { done <- cmd.RunE(cmd, nil) }()
	<-started
	cancel() // what SIGTERM does (signal.NotifyContext in run)
	stopped := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the step still runs 5 s after the signal")
	}
	if d := time.Since(stopped); d > 2*time.Second {
		t.Errorf("the step stopped %v after the signal, want within 2 s", d)
	}
	if o.code != stagecontract.ExitTransient {
		t.Errorf("exit code %d, want %d (transient: the kubelet may rerun the step)", o.code, stagecontract.ExitTransient)
	}
	data, err := os.ReadFile(sum)
	if err != nil {
		t.Fatalf("no summary: %v", err)
	}
	var s stagecontract.StageSummary
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if s.Op != "in" || s.ErrorClass != "transient" || !strings.Contains(s.Error, "canceled") {
		t.Errorf("summary %+v, want op in, a transient error saying canceled", s)
	}
}
