package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"

	// The stores a run's prefix may be in, registered with storage.
	_ "github.com/kdefer/kdefer/storage/drivers"
)

// archivedLogs prints the ended pod's logs that run's stage-out archived
// in its bucket (stageOut.logs), read with the caller's own credentials for
// the store (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, AZURE_*): the logs
// outlive every pod. container, when set, picks one container's. A log cut
// at stageOut.logs.maxBytes is printed as stored, head, marker line and
// tail, with a note on errw saying how much of it is left out: stdout
// stays the log, for a pipe.
func archivedLogs(ctx context.Context, w, errw io.Writer, run *v1.DeferRun, container string) error {
	prefixURL, err := runPrefixURL(run)
	if err != nil {
		return err
	}
	loc, err := storage.ParseURL(prefixURL)
	if err != nil {
		return fmt.Errorf("run %s's prefix: %w", run.Name, err)
	}
	be, err := storage.Open(ctx, loc, storage.OpenOptions{})
	if err != nil {
		return fmt.Errorf("open %s: %w", loc, err)
	}
	defer be.Close()
	m, err := storage.ReadManifest(ctx, be, loc.Prefix+stagecontract.ManifestKey, storage.DefaultRetry())
	if err != nil {
		return fmt.Errorf("run %s: %w", run.Name, err)
	}
	// The ended pod's logs and the stage-out step's, listed in the
	// manifest; the defer containers', listed after it by the stage-logs
	// sidecar (absent without defer containers).
	logs, warnings := m.Logs, m.LogWarnings
	steps, err := readStepLogs(ctx, be, loc.Prefix+stagecontract.StepLogsKey(v1.DeferPodName(run)))
	if err != nil {
		return fmt.Errorf("run %s: %w", run.Name, err)
	}
	if steps != nil {
		logs, warnings = append(slices.Clone(logs), steps.Logs...), append(slices.Clone(warnings), steps.LogWarnings...)
	}
	for _, lw := range warnings {
		if container == "" || lw.Container == container {
			fmt.Fprintf(w, "==> %s/%s: not archived: %s <==\n", lw.Pod, lw.Container, lw.Reason)
		}
	}
	if len(logs) == 0 {
		return fmt.Errorf("run %s's manifest lists no logs (stageOut.logs.enabled false, or the logs endpoint was unreachable: see the stage-out step's warnings)", run.Name)
	}
	shown := 0
	for _, l := range logs {
		rest, ok := strings.CutPrefix(l.Key, stagecontract.LogsDir)
		if !ok || strings.Contains(rest, "..") {
			continue // not a log kdefer-stage stores
		}
		name := strings.TrimSuffix(rest, ".log")
		if c := strings.TrimSuffix(name[strings.LastIndex(name, "/")+1:], ".previous"); container != "" && c != container {
			continue
		}
		fmt.Fprintf(w, "==> %s <==\n", name)
		if t := l.Truncated; t != nil {
			fmt.Fprintf(errw, "kdefer: %s: %d of its %d bytes were left out (stageOut.logs.maxBytes): the first %d and the last %d are printed, with a marker line between them\n",
				name, t.OmittedBytes(), t.OriginalSize, t.HeadBytes, t.TailBytes)
		}
		if err := copyObject(ctx, w, be, loc.Prefix+l.Key); err != nil {
			return fmt.Errorf("read %s: %w", l.Key, err)
		}
		shown++
	}
	if shown == 0 {
		return fmt.Errorf("run %s archived no log of container %q", run.Name, container)
	}
	return nil
}

// readStepLogs reads the stage-logs sidecar's list at key, nil when there
// is none.
func readStepLogs(ctx context.Context, be storage.Backend, key string) (*stagecontract.StepLogs, error) {
	var buf bytes.Buffer
	err := copyObject(ctx, &buf, be, key)
	if errors.Is(err, storage.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	var l stagecontract.StepLogs
	if err := json.Unmarshal(buf.Bytes(), &l); err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return &l, nil
}

func copyObject(ctx context.Context, w io.Writer, be storage.Backend, key string) error {
	rc, _, err := be.NewReader(ctx, key, 0, -1)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}

// runPrefixURL is the URL of run's stage-out prefix: its manifest's, with
// the query (S3 endpoint, region, ...) that the stage-out URL of the run's
// trigger (a trigger rule's url, else stageOut.url) and the policy's S3
// settings give.
func runPrefixURL(run *v1.DeferRun) (string, error) {
	so := run.Spec.Policy.StageOut
	prefix, ok := storage.SplitManifestURL(run.Status.ManifestURL)
	if so == nil || !ok {
		return "", fmt.Errorf("run %s has no manifest (status.manifestURL): its stage-out has not completed", run.Name)
	}
	if _, q, _ := strings.Cut(v1.StageURLWithS3(run.Spec.Policy.StageOutURL(run.Status.Trigger), run.Spec.Policy.S3), "?"); q != "" {
		if _, err := url.ParseQuery(q); err == nil {
			prefix += "?" + q
		}
	}
	return prefix, nil
}
