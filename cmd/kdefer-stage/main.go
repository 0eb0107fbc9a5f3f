// Command kdefer-stage moves files between a directory and object storage:
// `kdefer-stage out` uploads a job's outputs (the defer pod's first step),
// `kdefer-stage in` downloads its inputs (the stage-in init container).
// Exit codes: 0 ok, 1 transient (retrying may help), 2 usage, 3 permanent.
//
// It owns the command line only: flags, logging, signal handling, the
// summary file and the exit code, one way for both subcommands (step.go).
// The transfers are stagein's and stageout's; what the controller may rely
// on (environment, exit codes, manifest, summary) is stagecontract's. It must
// not talk to the Kubernetes API: it runs with no service account and
// learns everything from its flags and KDEFER_* environment.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/storage"

	// The stores kdefer-stage speaks: s3://, file://, gs://, azblob:// (and
	// mem:// for tests), registered with storage on import.
	_ "github.com/kdefer/kdefer/storage/drivers"
)

func main() {
	// The live heap is small and bounded (pooled buffers, one per worker),
	// so trade a larger heap for less GC CPU, under a soft limit that keeps
	// peak RSS well below the 128 MiB budget. GOGC/GOMEMLIMIT still win.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

// volumeRootUsage is the help of out's and in's --volume-root.
const volumeRootUsage = "the mount point of the volume DIR lies in: the directories below it down to DIR are opened without following a link, and one that is a link, a FIFO or (for out) missing fails the run (exit 3); default: DIR's whole path is trusted"

// stepLogsTimeout bounds the stage-logs sidecar's archive, within the
// defer pod's 30 s termination grace period.
const stepLogsTimeout = 25 * time.Second

// run executes the command line args and returns the exit code.
func run(args []string, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	// The log, the progress reports and the transfers' workers write from
	// many goroutines: one write call each, which a file takes whole, but
	// any other writer (a test's buffer) needs them one at a time.
	if _, ok := stderr.(*os.File); !ok {
		stderr = zerolog.SyncWriter(stderr)
	}
	o := &options{stderr: stderr, code: stagecontract.ExitOK, self: stageout.SelfLogFromEnv(os.LookupEnv)}
	root := &cobra.Command{
		Use:           "kdefer-stage",
		Short:         "Move files between a directory and object storage (file://, s3://, gs://, azblob://, mem://)",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       toolVersion(),
	}
	o.addFlags(root)
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return o.startProfile() }
	defer o.stopProfile()

	var out stageout.Options
	var checksums []string
	outCmd := o.command(ctx, step{
		cmd: &cobra.Command{
			Use:   "out --from DIR --to URL",
			Short: "Upload DIR under the URL prefix, then write PREFIX/" + stagecontract.ManifestKey,
			Long: `Upload every regular file under DIR to URL/<relative path>, skipping objects
already stored with the same size and checksum, and write the manifest last.
URL placeholders {namespace} {job} {pod} {index} {trigger} {uid} {node} are
expanded from KDEFER_* environment variables.
S3 URL parameters: endpoint=http://host:port, region=, use_path_style=true,
disable_https=true. Credentials come from the AWS environment or files only.`,
		},
		op: "out", urlFlag: "--to", url: &out.To, transfer: &out.TransferOptions,
		run: func(ctx context.Context) (storage.TransferResult, error) {
			out.Version = toolVersion()
			set, err := storage.ParseChecksums(checksums)
			if err != nil {
				return storage.TransferResult{}, &storage.Error{Class: storage.Usage, Op: "--checksums", Err: err,
					Fix: "list some of " + strings.Join(stagecontract.ManifestChecksums, ",")}
			}
			out.Checksums = set
			logs, err := stageout.LogClientFromEnv(os.LookupEnv, false)
			if err != nil {
				return storage.TransferResult{}, storage.Usagef("archive logs: %w", err)
			}
			out.Logs = logs
			out.Logs.Self = o.self
			r, err := stageout.Run(ctx, out)
			return r.TransferResult, err
		},
	})
	outCmd.Flags().StringVar(&out.From, "from", "", "directory to upload (required)")
	outCmd.Flags().StringVar(&out.To, "to", "", "destination URL prefix (required)")
	outCmd.Flags().StringVar(&out.VolumeRoot, "volume-root", "", volumeRootUsage)
	outCmd.Flags().BoolVar(&out.RequireFiles, "require-files", false, "fail when no file is chosen (default: warn and write an empty manifest)")
	outCmd.Flags().StringSliceVar(&checksums, "checksums", nil, "checksums the manifest records besides CRC32C, computed in the upload's read pass: "+strings.Join(stagecontract.ManifestChecksums, ", ")+" (comma-separated)")
	outCmd.Flags().BoolVar(&out.Overwrite, "overwrite", false, "replace outputs another pod (KDEFER_UID) left under the prefix; without it such a prefix is refused (exit 3)")
	_ = outCmd.MarkFlagRequired("from")
	_ = outCmd.MarkFlagRequired("to")

	var in stagein.Options
	inCmd := o.command(ctx, step{
		cmd: &cobra.Command{
			Use:   "in --from URL --to DIR",
			Short: "Download a prefix, or the files of a manifest, into DIR",
			Long: `Download the files of the manifest a prefix holds (PREFIX/` + stagecontract.ManifestKey + `),
or of the manifest the URL names, verifying every checksum it records; a
prefix without kdefer's objects is downloaded whole, checked against the
checksums the store keeps.
Files are written to a temporary name and renamed when complete; files
already present with the right content are skipped; keys that would leave
DIR are refused before anything is written.`,
		},
		op: "in", urlFlag: "--from", url: &in.From, transfer: &in.TransferOptions,
		run: func(ctx context.Context) (storage.TransferResult, error) {
			r, err := stagein.Run(ctx, in)
			return r.TransferResult, err
		},
	})
	inCmd.Flags().StringVar(&in.From, "from", "", "source URL prefix or manifest URL (required)")
	inCmd.Flags().StringVar(&in.To, "to", "", "destination directory (required)")
	inCmd.Flags().StringVar(&in.VolumeRoot, "volume-root", "", volumeRootUsage)
	inCmd.Flags().BoolVar(&in.AllowEmpty, "allow-empty", false, "succeed when the prefix holds no objects")
	inCmd.Flags().BoolVar(&in.AllowUncommitted, "allow-uncommitted", false, "stage in a prefix that holds kdefer's "+stagecontract.ReservedDir+" objects but no manifest (a stage-out that never completed), its objects as they are; without it such a prefix is refused (exit 3)")
	_ = inCmd.MarkFlagRequired("from")
	_ = inCmd.MarkFlagRequired("to")

	// logs runs as the defer pod's stage-logs sidecar: the kubelet stops it
	// (SIGTERM) once the last defer container has ended, and it then has
	// the pod's grace period to archive their logs, so the transfer runs
	// on a context SIGTERM does not cancel, bounded by stepLogsTimeout.
	var stepLogs stageout.StepLogsOptions
	logsCmd := o.command(context.WithoutCancel(ctx), step{
		cmd: &cobra.Command{
			Use:   "logs --to URL",
			Short: "Wait for SIGTERM, then archive the defer pod's defer containers' logs under URL/" + stagecontract.LogsDir,
			Long: `Run as a defer pod's stage-logs sidecar: wait until the kubelet stops it
(SIGTERM, once the last defer container has ended), then fetch the defer
containers' logs, every attempt, from kdefer-controller's logs endpoint
(KDEFER_LOGS_URL, KDEFER_LOGS_CA, the projected token) and store them under
URL/` + stagecontract.LogsDir + `POD/, listed in URL/` + stagecontract.StepLogsKey("POD") + `.
The manifest is never rewritten. URL placeholders are expanded as for out.`,
		},
		op: "logs", urlFlag: "--to", url: &stepLogs.To, transfer: &stepLogs.TransferOptions,
		run: func(actx context.Context) (storage.TransferResult, error) {
			<-ctx.Done()
			actx, cancel := context.WithTimeout(actx, stepLogsTimeout)
			defer cancel()
			logs, err := stageout.LogClientFromEnv(os.LookupEnv, true)
			if err != nil {
				return storage.TransferResult{}, storage.Usagef("archive the steps' logs: %w", err)
			}
			if logs.Source == nil {
				return storage.TransferResult{}, storage.Usagef("archive the steps' logs: %s is not set", stagecontract.EnvLogsURL)
			}
			stepLogs.Logs = logs
			if o.self != nil {
				stepLogs.Logs.Pod, stepLogs.Logs.Self = o.self.Pod, o.self
			}
			return stageout.ArchiveStepLogs(actx, stepLogs)
		},
	})
	logsCmd.Flags().StringVar(&stepLogs.To, "to", "", "the stage-out's destination URL prefix (required)")
	_ = logsCmd.MarkFlagRequired("to")

	root.AddCommand(outCmd, inCmd, logsCmd)
	root.SetArgs(args)
	root.SetOut(os.Stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(stderr, "kdefer-stage: %v\n", err)
		fmt.Fprintln(stderr, "run 'kdefer-stage --help' for usage")
		return stagecontract.ExitUsage
	}
	return o.code
}
