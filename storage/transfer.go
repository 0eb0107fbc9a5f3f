package storage

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/utils/clock"

	"github.com/kdefer/kdefer/stagecontract"
)

// TransferOptions are the settings stage-in and stage-out share: how many
// transfers run at once, how requests are retried and stalls detected, and
// where progress goes. Both engines' Options embed it, so kdefer-stage sets
// them one way.
type TransferOptions struct {
	// Concurrency is the number of transfers in flight (default 16).
	Concurrency int
	Retry       RetryPolicy
	Log         zerolog.Logger
	Clock       clock.WithTicker
	// ProgressInterval between progress lines (0: none).
	ProgressInterval time.Duration
	// Watch, when set, is handed the run's progress to show instead of a
	// log line every ProgressInterval (kdefer-stage's bar on a terminal);
	// it returns when ctx ends.
	Watch func(ctx context.Context, p *Progress)
	// IdleTimeout fails a stalled S3 connection (see OpenOptions).
	IdleTimeout time.Duration
	// OpenTimeout gives up one open of a local file that hangs (default
	// DefaultOpenTimeout; see OpenFile): the file costs itself, not the run.
	OpenTimeout time.Duration
	// Backend, when set, is used instead of opening the URL (tests).
	Backend Backend
	// Include and Exclude choose the files by their relative path (Filter).
	Include, Exclude []string
	// DryRun logs what would be transferred and skipped, and writes
	// nothing: no object, no manifest, no local file or directory.
	DryRun bool
}

// OpenOptions are the options a backend is opened with for this transfer.
func (o TransferOptions) OpenOptions(create bool) OpenOptions {
	return OpenOptions{Concurrency: o.Concurrency, Create: create, IdleTimeout: o.IdleTimeout, OpenTimeout: o.OpenTimeout}
}

// ReportProgress shows p until ctx ends: through Watch when set, else as a
// log line every ProgressInterval.
func (o TransferOptions) ReportProgress(ctx context.Context, p *Progress) {
	if o.Watch != nil {
		o.Watch(ctx, p)
		return
	}
	p.Run(ctx, o.Log, o.ProgressInterval)
}

// DefaultConcurrency is the number of transfers in flight unless set.
const DefaultConcurrency = 16

// WithDefaults returns o with what is unset filled in: DefaultConcurrency
// transfers, DefaultOpenTimeout, the real clock, and retries waiting on that
// clock.
func (o TransferOptions) WithDefaults() TransferOptions {
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = DefaultOpenTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Retry.Clock == nil {
		o.Retry.Clock = o.Clock
	}
	return o
}

// TransferResult is what a transfer did; both engines' Results embed it,
// and kdefer-stage turns it into the StageSummary.
type TransferResult struct {
	// Bytes and Objects moved by this run; Skipped objects were complete
	// at the destination already.
	Bytes, Objects, Skipped int64
	// TotalBytes of every file the run covers, moved or skipped.
	TotalBytes int64
	// ManifestURL of the manifest written or read, without credentials.
	ManifestURL string
	// Committer of the manifest a stage-in read (StageSummary.CommittedBy).
	Committer *stagecontract.Committer
	// Unsaved counts the files a stage-out chose but could not store; the
	// manifest lists each with its reason (stagecontract.StageSummary.Unsaved).
	Unsaved int64
	// Logs counts the logs a stage-out archived; LogWarnings are those it
	// could not, with their reasons (stagecontract.StageSummary).
	Logs        int64
	LogWarnings []stagecontract.LogWarning
}
