package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/storage"
)

const defaultTerminationLog = "/dev/termination-log"

// maxErrorLen keeps the summary far below the kubelet's 4096-byte
// termination message limit.
const maxErrorLen = 1500

// options are the flags both subcommands share, and the exit code the one
// that ran leaves.
type options struct {
	concurrency      int
	summaryFile      string
	progressInterval time.Duration
	logFormat        string
	attempts         int
	cpuProfile       string
	idleTimeout      time.Duration
	openTimeout      time.Duration
	include, exclude []string
	dryRun           bool

	stderr io.Writer
	code   int
	// self, when set, keeps the step's own log for stage-out to archive
	// (stagecontract.EnvLogsSelf).
	self *stageout.SelfLog
}

// addFlags adds the shared flags to root, for every subcommand.
func (o *options) addFlags(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.IntVar(&o.concurrency, "concurrency", storage.DefaultConcurrency, "transfers in flight (files and parts of large files)")
	pf.StringVar(&o.summaryFile, "summary-file", "", "write a JSON summary here (default "+defaultTerminationLog+" when it exists; \"-\" for none)")
	pf.DurationVar(&o.progressInterval, "progress-interval", 0, "progress line interval (default 10s, 1s on a terminal; negative: none)")
	pf.StringVar(&o.logFormat, "log-format", "auto", "json, console, or auto (console on a terminal)")
	pf.IntVar(&o.attempts, "attempts", storage.DefaultRetry().Attempts, "tries per request on transient errors")
	pf.DurationVar(&o.idleTimeout, "idle-timeout", storage.DefaultIdleTimeout, "retry a transfer whose connection makes no progress for this long")
	pf.DurationVar(&o.openTimeout, "open-timeout", storage.DefaultOpenTimeout, "give up opening a local file or directory that does not answer (a dead NFS or FUSE mount) after this long; that file alone is not staged")
	pf.StringArrayVar(&o.include, "include", nil, "only transfer paths matching this glob (repeatable; ** crosses directories, {a,b} either)")
	pf.StringArrayVar(&o.exclude, "exclude", nil, "skip paths matching this glob (repeatable)")
	pf.BoolVar(&o.dryRun, "dry-run", false, "log what would be transferred and skipped; write nothing")
	pf.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile here (for benchmarks)")
	_ = pf.MarkHidden("cpuprofile")
}

// startProfile sets the memory limit the concurrency needs and starts the
// CPU profile when one was asked for.
func (o *options) startProfile() error {
	if os.Getenv("GOMEMLIMIT") == "" {
		// Each worker may hold ~1.3 MiB of pooled buffers; below that
		// the collector would run continuously.
		debug.SetMemoryLimit(int64(64<<20 + max(o.concurrency-16, 0)*(3<<19)))
	}
	if o.cpuProfile == "" {
		return nil
	}
	f, err := os.Create(o.cpuProfile)
	if err != nil {
		return fmt.Errorf("create CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("start CPU profile: %w", err)
	}
	return nil
}

func (o *options) stopProfile() {
	if o.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
}

// step is one subcommand: its cobra command (use and help; its own flags
// are added by the caller), the URL flag that is a template, the engine's
// shared options to fill from the flags, and the transfer itself.
type step struct {
	cmd      *cobra.Command
	op       string // "in" or "out", the summary's Op
	urlFlag  string // "--to" or "--from"
	url      *string
	transfer *storage.TransferOptions
	run      func(context.Context) (storage.TransferResult, error)
}

// command is the one skeleton both subcommands run: logging, engine
// options from the shared flags, URL template expansion, the transfer, then
// the summary and the exit code. A failed transfer is not a cobra error:
// cobra errors mean usage (exit 2).
func (o *options) command(ctx context.Context, s step) *cobra.Command {
	s.cmd.Args = cobra.NoArgs
	s.cmd.RunE = func(*cobra.Command, []string) error {
		log, interval, tty := o.logger()
		*s.transfer = storage.TransferOptions{Log: log, ProgressInterval: interval, Concurrency: o.concurrency,
			Retry: o.retry(log), IdleTimeout: o.idleTimeout, OpenTimeout: o.openTimeout, Include: o.include, Exclude: o.exclude, DryRun: o.dryRun}
		if tty && o.logFormat != "json" {
			s.transfer.Watch = progressBar(o.stderr, s.op)
		}
		start := time.Now()
		url, err := storage.ExpandTemplate(*s.url, os.LookupEnv)
		if err != nil {
			err = storage.Permanentf("set the KDEFER_* variable or fix the template", "%s: %w", s.urlFlag, err)
			o.code = o.finish(log, s.op, start, storage.TransferResult{}, err)
			return nil
		}
		*s.url = url
		res, err := runUntilStopped(ctx, stopGrace, s.run)
		o.code = o.finish(log, s.op, start, res, err)
		return nil
	}
	return s.cmd
}

// stopGrace bounds how long a transfer may take to stop once SIGTERM
// arrived. The engines honour cancellation in every copy; this is the
// backstop for a store call that does not, so the summary is written and the
// step exits within 2 s whatever a backend does.
const stopGrace = 1500 * time.Millisecond

// runUntilStopped runs the transfer and returns its outcome, or, when ctx
// ends and the transfer has not returned grace later, a cancellation error
// (the abandoned transfer ends with the process).
func runUntilStopped(ctx context.Context, grace time.Duration, run func(context.Context) (storage.TransferResult, error)) (storage.TransferResult, error) {
	type outcome struct {
		res storage.TransferResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := run(ctx)
		done <- outcome{res, err}
	}()
	select {
	case out := <-done:
		return out.res, out.err
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case out := <-done:
		return out.res, out.err
	case <-t.C:
		return storage.TransferResult{}, fmt.Errorf("stop: the transfer did not stop within %s: %w", grace, context.Cause(ctx))
	}
}

func (o *options) retry(log zerolog.Logger) storage.RetryPolicy {
	p := storage.DefaultRetry()
	p.Attempts = max(o.attempts, 1)
	p.OnRetry = func(attempt int, wait time.Duration, err error) {
		log.Warn().Int("attempt", attempt).Str("wait", wait.Round(time.Millisecond).String()).Str("error", err.Error()).Msg("retry after transient error")
	}
	return p
}

// logger returns the log for --log-format, the progress interval, which
// is shorter on a terminal, and whether stderr is a terminal.
func (o *options) logger() (zerolog.Logger, time.Duration, bool) {
	tty := false
	if f, ok := o.stderr.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	console := o.logFormat == "console" || (o.logFormat == "auto" && tty)
	zerolog.TimeFieldFormat = time.RFC3339Nano
	w := o.stderr
	if console {
		w = zerolog.ConsoleWriter{Out: o.stderr, TimeFormat: "15:04:05", NoColor: !tty}
	}
	if o.self != nil {
		w = io.MultiWriter(w, o.self.Tail)
	}
	interval := o.progressInterval
	if interval == 0 {
		interval = 10 * time.Second
		if console {
			interval = time.Second
		}
	}
	return zerolog.New(w).With().Timestamp().Logger(), interval, tty
}

// finish logs the outcome, writes the summary and returns the exit code.
func (o *options) finish(log zerolog.Logger, op string, start time.Time, r storage.TransferResult, err error) int {
	s := stagecontract.StageSummary{Op: op, DurationSeconds: float64(time.Since(start).Milliseconds()) / 1000,
		Bytes: r.Bytes, Objects: r.Objects, Skipped: r.Skipped, TotalBytes: r.TotalBytes, ManifestURL: r.ManifestURL,
		CommittedBy: r.Committer, Unsaved: r.Unsaved, Logs: r.Logs, LogWarnings: r.LogWarnings}
	code := stagecontract.ExitOK
	if err != nil {
		class := storage.ClassOf(err)
		if errors.Is(err, context.Canceled) {
			class = storage.Transient // SIGTERM: the kubelet may rerun us
		}
		code = exitCode(class)
		msg := err.Error()
		if len(msg) > maxErrorLen {
			msg = msg[:maxErrorLen] + "..."
		}
		s.ErrorClass, s.Error = class.String(), msg
		s.ManifestURL, s.CommittedBy, s.Logs, s.LogWarnings = "", nil, 0, nil
		log.Error().Str("error", msg).Str("errorClass", s.ErrorClass).Int("exitCode", code).Msg("fail stage-" + op)
	} else {
		log.Info().Int64("bytes", s.Bytes).Int64("objects", s.Objects).Int64("skipped", s.Skipped).Int64("unsaved", s.Unsaved).
			Int64("logs", s.Logs).Int("logWarnings", len(s.LogWarnings)).Float64("durationSeconds", s.DurationSeconds).Str("manifest", s.ManifestURL).Bool("dryRun", o.dryRun).Msg("complete stage-" + op)
	}
	o.writeSummary(log, s)
	return code
}

// exitCode maps an error class to the exit code the controller reads.
func exitCode(class storage.Class) int {
	switch class {
	case storage.Permanent:
		return stagecontract.ExitPermanent
	case storage.Usage:
		return stagecontract.ExitUsage
	default:
		return stagecontract.ExitTransient
	}
}

// writeSummary writes s to --summary-file, else to the termination log when
// the kubelet provides one. A summary that cannot be written is logged, not
// fatal: the exit code still tells the controller the outcome.
func (o *options) writeSummary(log zerolog.Logger, s stagecontract.StageSummary) {
	path := o.summaryFile
	if path == "" {
		if _, err := os.Stat(defaultTerminationLog); err == nil {
			path = defaultTerminationLog
		}
	}
	if path == "" || path == "-" {
		return
	}
	data, _ := json.Marshal(s) // plain strings and numbers: cannot fail
	if err := os.WriteFile(path, data, 0o644); err != nil {
		log.Warn().Str("path", path).Str("error", err.Error()).Msg("write summary")
	}
}
