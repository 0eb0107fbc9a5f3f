package stageout

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// LogSource serves the ended pod's container logs to a stage-out
// (LogClient: kdefer-controller's logs endpoint).
type LogSource interface {
	// Index lists the logs there are.
	Index(ctx context.Context) (stagecontract.LogsIndex, error)
	// Open streams one log.
	Open(ctx context.Context, ref stagecontract.LogRef) (io.ReadCloser, error)
}

// Logs are the logs a stage-out archives before its manifest.
type Logs struct {
	Source LogSource
	// MaxBytes caps each log: a longer one keeps its first MaxBytes/4
	// bytes and its last MaxBytes-MaxBytes/4, with a marker line between
	// them, and its manifest entry says so (logKeeper).
	MaxBytes int64
	// Pod is the pod Source serves the logs of, named in a warning when
	// none can be listed (default: the ended pod, KDEFER_POD).
	Pod string
	// Self, when set, is the stage step's own log, archived after the
	// ended pod's: it says what the step did up to its manifest (what it
	// logs after, the outcome, is in its summary and the DeferRun).
	Self *SelfLog
}

// SelfLog is the stage step's own log.
type SelfLog struct {
	// Pod and Container name it: the defer pod and its stage step.
	Pod, Container string
	// Tail holds the step's log so far: its tail, where the warnings and
	// the outcome are (a cut one's manifest entry says so, HeadBytes 0).
	Tail *TailWriter
}

// SelfLogFromEnv returns the stage step's own log that
// stagecontract.EnvLogsSelf names, keeping EnvLogsMaxBytes of it, or nil
// when the variable is unset or malformed (the step's log then stays with
// its pod only).
func SelfLogFromEnv(env func(string) (string, bool)) *SelfLog {
	v, _ := env(stagecontract.EnvLogsSelf)
	pod, container, ok := strings.Cut(v, "/")
	if !ok || !safeLogName(pod) || !safeLogName(container) {
		return nil
	}
	limit := int64(defaultSelfLogBytes)
	if s, _ := env(stagecontract.EnvLogsMaxBytes); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
			limit = n
		}
	}
	return &SelfLog{Pod: pod, Container: container, Tail: NewTailWriter(limit)}
}

// defaultSelfLogBytes caps the step's own log when no cap is given.
const defaultSelfLogBytes = 10 << 20

// TailWriter is an io.Writer that keeps the last bytes written to it, at
// most twice its cap at a time.
type TailWriter struct {
	mu   sync.Mutex
	max  int64
	buf  []byte
	from int64 // bytes dropped from the front
}

// NewTailWriter keeps the last max bytes (max > 0).
func NewTailWriter(max int64) *TailWriter { return &TailWriter{max: max} }

func (w *TailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if n := int64(len(w.buf)); n > 2*w.max {
		w.from += n - w.max
		w.buf = append(w.buf[:0], w.buf[n-w.max:]...)
	}
	return len(p), nil
}

// Tail returns a copy of the last max bytes written, and whether any were
// dropped.
func (w *TailWriter) Tail() ([]byte, bool) {
	b, total := w.tail()
	return b, total > int64(len(b))
}

// tail returns a copy of the last max bytes written, and how many bytes
// were written in all.
func (w *TailWriter) tail() ([]byte, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.buf
	if n := int64(len(b)); n > w.max {
		b = b[n-w.max:]
	}
	return bytes.Clone(b), w.from + int64(len(w.buf))
}

// kept returns the object to store of the step's log and, when bytes were
// left out, the manifest's record of it: the marker line, then the tail.
func (w *TailWriter) kept() ([][]byte, *stagecontract.LogTruncation) {
	b, total := w.tail()
	if total <= int64(len(b)) {
		return [][]byte{b}, nil
	}
	return cutLog(nil, [][]byte{b}, total, w.max)
}

// archiveLogs stores every log the source lists under the prefix's LogsDir,
// then the step's own (Logs.Self), and returns their manifest entries,
// sorted by key, and a warning for each log it could not fetch. The logs are
// a record of the pod, not its outputs: one that cannot be fetched (the
// endpoint is unreachable, the kubelet has removed an evicted pod's
// containers or has no previous attempt) never fails the stage-out, but is
// named with its reason in the manifest's logWarnings and the summary, so a
// log missing from the bucket always says why; a store error fails the
// run, as it would for a file. An endpoint that does not answer, or answers
// 5xx, is asked again under the transfer's retry policy first: the node
// agent restarts with its node, and a defer pod resumed on a node that came
// back can start before it serves (seen in TestNodeCrash).
func (e *engine) archiveLogs(ctx context.Context) ([]stagecontract.ManifestFile, []stagecontract.LogWarning, error) {
	if e.o.DryRun {
		return nil, nil, nil
	}
	var out []stagecontract.ManifestFile
	var warnings []stagecontract.LogWarning
	warn := func(pod string, ref stagecontract.LogRef, reason string) {
		e.o.Log.Warn().Str("pod", pod).Str("container", ref.Container).Bool("previous", ref.Previous).Str("reason", reason).Msg("skip a log")
		warnings = append(warnings, stagecontract.LogWarning{Pod: pod, Container: ref.Container, Previous: ref.Previous, Reason: reason})
	}
	if src := e.o.Logs.Source; src != nil {
		idx, err := storage.RetryValue(ctx, e.o.Retry, src.Index)
		if err != nil {
			pod := e.o.Logs.Pod
			if pod == "" {
				pod, _ = e.o.Env(stagecontract.EnvPod)
			}
			warn(pod, stagecontract.LogRef{}, "list the pod's logs: "+err.Error())
		}
		for _, ref := range idx.Logs {
			if !safeLogName(idx.Pod) || !safeLogName(ref.Container) {
				warn(idx.Pod, ref, "not a Kubernetes name")
				continue
			}
			k, err := storage.RetryValue(ctx, e.o.Retry, func(ctx context.Context) (*logKeeper, error) { return e.fetchLog(ctx, ref) })
			if err != nil {
				warn(idx.Pod, ref, err.Error())
				continue
			}
			data, cut := k.kept()
			if cut != nil {
				e.o.Log.Info().Str("container", ref.Container).Bool("previous", ref.Previous).Int64("maxBytes", e.o.Logs.MaxBytes).
					Int64("bytes", cut.OriginalSize).Int64("leftOut", cut.OmittedBytes()).Msg("keep the head and tail of a long log")
			}
			f, err := e.storeLog(ctx, stagecontract.LogKey(idx.Pod, ref), data, cut)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, f)
		}
	}
	if self := e.o.Logs.Self; self != nil {
		// Last, so it holds the warnings above.
		data, cut := self.Tail.kept()
		f, err := e.storeLog(ctx, stagecontract.LogKey(self.Pod, stagecontract.LogRef{Container: self.Container}), data, cut)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b stagecontract.ManifestFile) int { return strings.Compare(a.Key, b.Key) })
	return out, warnings, nil
}

// storeLog stores one log, the concatenation of data, at rel under the
// prefix and returns its manifest entry, which records cut.
func (e *engine) storeLog(ctx context.Context, rel string, data segments, cut *stagecontract.LogTruncation) (stagecontract.ManifestFile, error) {
	if err := e.beforeWrite(ctx); err != nil {
		return stagecontract.ManifestFile{}, err
	}
	size := data.size()
	var crc uint32
	err := e.o.Retry.Do(ctx, func(ctx context.Context) error {
		var err error
		crc, err = e.be.Put(ctx, e.prefix+rel, data, size, storage.PutOptions{ContentType: "text/plain; charset=utf-8"})
		return err
	})
	if err != nil {
		return stagecontract.ManifestFile{}, storage.WithOp("store log "+rel, err)
	}
	return stagecontract.ManifestFile{Key: rel, Size: size, Checksum: storage.FormatChecksum(crc), ModTime: e.o.Clock.Now().UTC(), Truncated: cut}, nil
}

// summaryLogWarnings bounds warnings for the summary, a termination
// message the kubelet cuts at 4096 bytes; the manifest keeps them all.
func summaryLogWarnings(warnings []stagecontract.LogWarning) []stagecontract.LogWarning {
	out := slices.Clone(warnings[:min(len(warnings), stagecontract.MaxSummaryLogWarnings)])
	for i := range out {
		if r := out[i].Reason; len(r) > stagecontract.MaxLogWarningReason {
			out[i].Reason = strings.ToValidUTF8(r[:stagecontract.MaxLogWarningReason], "") + "..."
		}
	}
	return out
}

// fetchLog reads one log, keeping what MaxBytes allows of it.
func (e *engine) fetchLog(ctx context.Context, ref stagecontract.LogRef) (*logKeeper, error) {
	rc, err := e.o.Logs.Source.Open(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	k := newLogKeeper(e.o.Logs.MaxBytes)
	if _, err := io.Copy(k, rc); err != nil {
		return nil, fmt.Errorf("read log of %s: %w", ref.Container, err)
	}
	return k, nil
}

// safeLogName is a name the endpoint may put in a key: a Kubernetes pod or
// container name (DNS subdomain characters), never a path.
func safeLogName(s string) bool {
	if s == "" || len(s) > 253 || s[0] == '.' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			return false
		}
	}
	return true
}
