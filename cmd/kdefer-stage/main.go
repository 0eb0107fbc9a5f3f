// Command kdefer-stage moves files between a directory and object storage:
// `kdefer-stage out` uploads a job's outputs (the defer pod's first step),
// `kdefer-stage in` downloads its inputs (the stage-in init container).
// Exit codes: 0 ok, 1 transient (retrying may help), 2 usage, 3 permanent.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/storage"
)

// toolVersion is kdefer's release version (v1alpha1.Version, stamped into
// images with -ldflags), plus the source revision when the build recorded
// one, e.g. "v0.1.0+3f2a9c1d0e4b" or "v0.1.0+3f2a9c1d0e4b.dirty". The
// manifest names it, so an upload says which uploader wrote it.
func toolVersion() string {
	return versionOf(v1.Version, debug.ReadBuildInfo)
}

func versionOf(release string, info func() (*debug.BuildInfo, bool)) string {
	bi, ok := info()
	if !ok {
		return release
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ".dirty"
			}
		}
	}
	if rev == "" {
		return release
	}
	return release + "+" + rev[:min(12, len(rev))] + dirty
}

const defaultTerminationLog = "/dev/termination-log"

// maxErrorLen keeps the summary far below the kubelet's 4096-byte
// termination message limit.
const maxErrorLen = 1500

func main() {
	// The live heap is small and bounded (pooled buffers, one per worker),
	// so trade a larger heap for less GC CPU, under a soft limit that keeps
	// peak RSS well below the 128 MiB budget. GOGC/GOMEMLIMIT still win.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

type common struct {
	concurrency      int
	summaryFile      string
	progressInterval time.Duration
	logFormat        string
	attempts         int
	cpuProfile       string
	idleTimeout      time.Duration
}

func run(args []string, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	var c common
	code := stagecontract.ExitOK
	root := &cobra.Command{
		Use:           "kdefer-stage",
		Short:         "Move files between a directory and object storage (file://, s3://, gs://, azblob://, mem://)",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       toolVersion(),
	}
	pf := root.PersistentFlags()
	pf.IntVar(&c.concurrency, "concurrency", 16, "transfers in flight (files and parts of large files)")
	pf.StringVar(&c.summaryFile, "summary-file", "", "write a JSON summary here (default "+defaultTerminationLog+" when it exists; \"-\" for none)")
	pf.DurationVar(&c.progressInterval, "progress-interval", 0, "progress line interval (default 10s, 1s on a terminal; negative: none)")
	pf.StringVar(&c.logFormat, "log-format", "auto", "json, console, or auto (console on a terminal)")
	pf.IntVar(&c.attempts, "attempts", storage.DefaultRetry().Attempts, "tries per request on transient errors")
	pf.DurationVar(&c.idleTimeout, "idle-timeout", storage.DefaultIdleTimeout, "retry a transfer whose connection makes no progress for this long")
	pf.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile here (for benchmarks)")
	_ = pf.MarkHidden("cpuprofile")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if os.Getenv("GOMEMLIMIT") == "" {
			// Each worker may hold ~1.3 MiB of pooled buffers; below that
			// the collector would run continuously.
			debug.SetMemoryLimit(int64(64<<20 + max(c.concurrency-16, 0)*(3<<19)))
		}
		if c.cpuProfile == "" {
			return nil
		}
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		return pprof.StartCPUProfile(f)
	}
	defer func() {
		if c.cpuProfile != "" {
			pprof.StopCPUProfile()
		}
	}()

	var outOpts stageout.Options
	out := &cobra.Command{
		Use:   "out --from DIR --to URL",
		Short: "Upload DIR under the URL prefix, then write PREFIX/" + stagecontract.ManifestKey,
		Long: `Upload every regular file under DIR to URL/<relative path>, skipping objects
already stored with the same size and checksum, and write the manifest last.
URL placeholders {namespace} {job} {pod} {index} {trigger} {uid} {node} are
expanded from KDEFER_* environment variables.
S3 URL parameters: endpoint=http://host:port, region=, use_path_style=true,
disable_https=true. Credentials come from the AWS environment or files only.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, interval := setupLog(stderr, c)
			outOpts.Log, outOpts.ProgressInterval, outOpts.Concurrency = log, interval, c.concurrency
			outOpts.Retry = retry(c, log)
			outOpts.IdleTimeout = c.idleTimeout
			outOpts.Version = toolVersion()
			start := time.Now()
			to, err := storage.ExpandTemplate(outOpts.To, os.LookupEnv)
			if err != nil {
				err = storage.Permanentf("set the KDEFER_* variable or fix the template", "--to: %w", err)
				code = finish(c, log, "out", start, stageout.Result{}, err)
				return nil
			}
			outOpts.To = to
			res, err := stageout.Run(ctx, outOpts)
			code = finish(c, log, "out", start, res, err)
			return nil
		},
	}
	out.Flags().StringVar(&outOpts.From, "from", "", "directory to upload (required)")
	out.Flags().StringVar(&outOpts.To, "to", "", "destination URL prefix (required)")
	out.Flags().StringArrayVar(&outOpts.Include, "include", nil, "only upload paths matching this glob (repeatable; ** crosses directories)")
	out.Flags().StringArrayVar(&outOpts.Exclude, "exclude", nil, "skip paths matching this glob (repeatable)")
	_ = out.MarkFlagRequired("from")
	_ = out.MarkFlagRequired("to")

	var inOpts stagein.Options
	in := &cobra.Command{
		Use:   "in --from URL --to DIR",
		Short: "Download a prefix, or the files of a manifest, into DIR",
		Long: `Download every object under the URL prefix into DIR, or, when the URL ends in
/` + stagecontract.ManifestKey + `, exactly the files it lists, verifying their checksums.
Files are written to a temporary name and renamed when complete; files
already present with the right content are skipped; keys that would leave
DIR are refused before anything is written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, interval := setupLog(stderr, c)
			inOpts.Log, inOpts.ProgressInterval, inOpts.Concurrency = log, interval, c.concurrency
			inOpts.Retry = retry(c, log)
			inOpts.IdleTimeout = c.idleTimeout
			start := time.Now()
			from, err := storage.ExpandTemplate(inOpts.From, os.LookupEnv)
			if err != nil {
				err = storage.Permanentf("set the KDEFER_* variable or fix the template", "--from: %w", err)
				code = finish(c, log, "in", start, stagein.Result{}, err)
				return nil
			}
			inOpts.From = from
			res, err := stagein.Run(ctx, inOpts)
			code = finish(c, log, "in", start, res, err)
			return nil
		},
	}
	in.Flags().StringVar(&inOpts.From, "from", "", "source URL prefix or manifest URL (required)")
	in.Flags().StringVar(&inOpts.To, "to", "", "destination directory (required)")
	in.Flags().BoolVar(&inOpts.AllowEmpty, "allow-empty", false, "succeed when the prefix holds no objects")
	_ = in.MarkFlagRequired("from")
	_ = in.MarkFlagRequired("to")

	root.AddCommand(out, in)
	root.SetArgs(args)
	root.SetOut(os.Stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(stderr, "kdefer-stage: %v\n", err)
		fmt.Fprintln(stderr, "run 'kdefer-stage --help' for usage")
		return stagecontract.ExitUsage
	}
	return code
}

func retry(c common, log zerolog.Logger) storage.RetryPolicy {
	p := storage.DefaultRetry()
	p.Attempts = max(c.attempts, 1)
	p.OnRetry = func(attempt int, wait time.Duration, err error) {
		log.Warn().Int("attempt", attempt).Str("wait", wait.Round(time.Millisecond).String()).Str("error", err.Error()).Msg("retry after transient error")
	}
	return p
}

func setupLog(stderr io.Writer, c common) (zerolog.Logger, time.Duration) {
	tty := false
	if f, ok := stderr.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	console := c.logFormat == "console" || (c.logFormat == "auto" && tty)
	zerolog.TimeFieldFormat = time.RFC3339Nano
	var w io.Writer = stderr
	if console {
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05", NoColor: !tty}
	}
	interval := c.progressInterval
	if interval == 0 {
		interval = 10 * time.Second
		if console {
			interval = time.Second
		}
	}
	return zerolog.New(w).With().Timestamp().Logger(), interval
}

// finish logs the outcome, writes the summary and returns the exit code.
func finish(c common, log zerolog.Logger, op string, start time.Time, res any, err error) int {
	s := stagecontract.StageSummary{Op: op, DurationSeconds: float64(time.Since(start).Milliseconds()) / 1000}
	switch r := res.(type) {
	case stageout.Result:
		s.Bytes, s.Objects, s.Skipped, s.TotalBytes, s.ManifestURL = r.Bytes, r.Objects, r.Skipped, r.TotalBytes, r.ManifestURL
	case stagein.Result:
		s.Bytes, s.Objects, s.Skipped, s.TotalBytes, s.ManifestURL = r.Bytes, r.Objects, r.Skipped, r.TotalBytes, r.ManifestURL
	}
	code := stagecontract.ExitOK
	if err != nil {
		class := storage.ClassOf(err)
		if errors.Is(err, context.Canceled) {
			class = storage.Transient // SIGTERM: the kubelet may rerun us
		}
		switch class {
		case storage.Permanent:
			code = stagecontract.ExitPermanent
		case storage.Usage:
			code = stagecontract.ExitUsage
		default:
			code = stagecontract.ExitTransient
		}
		msg := err.Error()
		if len(msg) > maxErrorLen {
			msg = msg[:maxErrorLen] + "..."
		}
		s.ErrorClass, s.Error = class.String(), msg
		s.ManifestURL = ""
		log.Error().Str("error", msg).Str("errorClass", s.ErrorClass).Int("exitCode", code).Msg("fail stage-" + op)
	} else {
		log.Info().Int64("bytes", s.Bytes).Int64("objects", s.Objects).Int64("skipped", s.Skipped).
			Float64("durationSeconds", s.DurationSeconds).Str("manifest", s.ManifestURL).Msg("complete stage-" + op)
	}
	path := c.summaryFile
	if path == "" {
		if _, err := os.Stat(defaultTerminationLog); err == nil {
			path = defaultTerminationLog
		}
	}
	if path != "" && path != "-" {
		data, _ := json.Marshal(s)
		if werr := os.WriteFile(path, data, 0o644); werr != nil {
			log.Warn().Str("path", path).Str("error", werr.Error()).Msg("write summary")
		}
	}
	return code
}
