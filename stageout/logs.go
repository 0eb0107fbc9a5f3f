package stageout

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

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
	// MaxBytes caps each log: a longer one keeps its last MaxBytes bytes,
	// where a pod says why it ended.
	MaxBytes int64
}

// archiveLogs stores every log the source lists under the prefix's LogsDir
// and returns their manifest entries, sorted by key. The logs are a record
// of the pod, not its outputs: one that cannot be fetched (the endpoint is
// unreachable, the kubelet has no previous attempt) is logged and left out
// of the list, and never fails the stage-out; a store error does, as it
// would for a file.
func (e *engine) archiveLogs(ctx context.Context) ([]stagecontract.ManifestFile, error) {
	src := e.o.Logs.Source
	if src == nil || e.o.DryRun {
		return nil, nil
	}
	idx, err := src.Index(ctx)
	if err != nil {
		e.o.Log.Warn().Str("error", err.Error()).Msg("skip the pod's logs: list them")
		return nil, nil
	}
	var out []stagecontract.ManifestFile
	for _, ref := range idx.Logs {
		if !safeLogName(idx.Pod) || !safeLogName(ref.Container) {
			e.o.Log.Warn().Str("pod", idx.Pod).Str("container", ref.Container).Msg("skip a log whose name is not a Kubernetes name")
			continue
		}
		data, truncated, err := e.fetchLog(ctx, ref)
		if err != nil {
			e.o.Log.Warn().Str("container", ref.Container).Bool("previous", ref.Previous).Str("error", err.Error()).Msg("skip a log: fetch it")
			continue
		}
		if truncated {
			e.o.Log.Info().Str("container", ref.Container).Bool("previous", ref.Previous).Int64("maxBytes", e.o.Logs.MaxBytes).Msg("keep the tail of a long log")
		}
		rel := stagecontract.LogKey(idx.Pod, ref)
		if err := e.beforeWrite(ctx); err != nil {
			return nil, err
		}
		var crc uint32
		err = e.o.Retry.Do(ctx, func(ctx context.Context) error {
			var err error
			crc, err = e.be.Put(ctx, e.prefix+rel, bytes.NewReader(data), int64(len(data)), storage.PutOptions{ContentType: "text/plain; charset=utf-8"})
			return err
		})
		if err != nil {
			return nil, storage.WithOp("store log "+rel, err)
		}
		out = append(out, stagecontract.ManifestFile{Key: rel, Size: int64(len(data)), Checksum: storage.FormatChecksum(crc), ModTime: e.o.Clock.Now().UTC()})
	}
	slices.SortFunc(out, func(a, b stagecontract.ManifestFile) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// fetchLog reads one log, keeping its last MaxBytes bytes.
func (e *engine) fetchLog(ctx context.Context, ref stagecontract.LogRef) ([]byte, bool, error) {
	rc, err := e.o.Logs.Source.Open(ctx, ref)
	if err != nil {
		return nil, false, err
	}
	defer rc.Close()
	data, truncated, err := readTail(rc, e.o.Logs.MaxBytes)
	if err != nil {
		return nil, false, fmt.Errorf("read log of %s: %w", ref.Container, err)
	}
	return data, truncated, nil
}

// readTail reads r to its end and returns its last max bytes (all of it
// when max <= 0), and whether anything was cut. It holds at most 2*max
// bytes (plus one read) at a time.
func readTail(r io.Reader, max int64) ([]byte, bool, error) {
	var buf []byte
	chunk := make([]byte, 64<<10)
	truncated := false
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if max > 0 && int64(len(buf)) > 2*max {
			buf = append(buf[:0], buf[int64(len(buf))-max:]...)
			truncated = true
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, err
		}
	}
	if max > 0 && int64(len(buf)) > max {
		buf = buf[int64(len(buf))-max:]
		truncated = true
	}
	return buf, truncated, nil
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
