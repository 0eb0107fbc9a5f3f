package stagecontract

// StageSummary is what `kdefer-stage` writes, as JSON, to its summary file
// (by default /dev/termination-log), and what the controller reads back from
// the step's termination message into the DeferRun.
type StageSummary struct {
	// Op is "in" or "out".
	Op string `json:"op"`
	// Bytes transferred in this run (skipped objects not counted).
	Bytes int64 `json:"bytes"`
	// Objects transferred in this run.
	Objects int64 `json:"objects"`
	// Skipped objects already complete at the destination.
	Skipped int64 `json:"skipped"`
	// Unsaved counts the files a stage-out could not store (unreadable,
	// vanished, not a regular file, ...). Each is listed with its reason in
	// the manifest's unsaved list. A run with Unsaved > 0 still exits 0 and
	// writes its manifest: every good byte is saved, and the controller marks
	// the run Incomplete and keeps the volume instead of releasing it.
	Unsaved int64 `json:"unsaved,omitempty"`
	// Logs counts the logs a stage-out archived (the manifest's logs).
	Logs int64 `json:"logs,omitempty"`
	// LogWarnings are the logs a stage-out could not archive, with their
	// reasons (at most MaxSummaryLogWarnings, each reason cut to
	// MaxLogWarningReason bytes: the summary is a termination message the
	// kubelet cuts at 4096 bytes); the manifest lists every one.
	LogWarnings []LogWarning `json:"logWarnings,omitempty"`
	// TotalBytes of every file the run covers, transferred or skipped.
	TotalBytes int64 `json:"totalBytes"`
	// DurationSeconds of the run.
	DurationSeconds float64 `json:"durationSeconds"`
	// ManifestURL of the manifest written (stage-out) or read (stage-in),
	// without credentials or query parameters.
	ManifestURL string `json:"manifestURL,omitempty"`
	// CommittedBy, on a stage-in from a manifest, names the stage-out
	// that committed the inputs (from the manifest).
	CommittedBy *Committer `json:"committedBy,omitempty"`
	// ErrorClass is empty on success, else "transient", "permanent" or "usage".
	ErrorClass string `json:"errorClass,omitempty"`
	// Error is the failure message (never holds credentials).
	Error string `json:"error,omitempty"`
}

// The bounds of a summary's log warnings.
const (
	MaxSummaryLogWarnings = 4
	MaxLogWarningReason   = 200
)

// Committer is the stage-out that wrote a manifest, as the manifest
// records it: its pod's name and uid (Identity's "pod" and "uid") and the
// trigger that ended the pod. The manifest holds the rest of its identity.
type Committer struct {
	Pod     string `json:"pod,omitempty"`
	UID     string `json:"uid,omitempty"`
	Trigger string `json:"trigger,omitempty"`
}
