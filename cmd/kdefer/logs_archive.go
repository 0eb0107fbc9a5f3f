package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
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
// outlive every pod. container, when set, picks one container's.
func archivedLogs(ctx context.Context, w io.Writer, run *v1.DeferRun, container string) error {
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
	if len(m.Logs) == 0 {
		return fmt.Errorf("run %s's manifest lists no logs (stageOut.logs.enabled false, or the logs endpoint was unreachable: see the stage-out step's warnings)", run.Name)
	}
	shown := 0
	for _, l := range m.Logs {
		rest, ok := strings.CutPrefix(l.Key, stagecontract.LogsDir)
		if !ok || strings.Contains(rest, "..") {
			continue // not a log kdefer-stage stores
		}
		name := strings.TrimSuffix(rest, ".log")
		if c := strings.TrimSuffix(name[strings.LastIndex(name, "/")+1:], ".previous"); container != "" && c != container {
			continue
		}
		fmt.Fprintf(w, "==> %s <==\n", name)
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
// the query (S3 endpoint, region, ...) the policy's stage-out URL and S3
// settings give.
func runPrefixURL(run *v1.DeferRun) (string, error) {
	so := run.Spec.Policy.StageOut
	prefix, ok := storage.SplitManifestURL(run.Status.ManifestURL)
	if so == nil || !ok {
		return "", fmt.Errorf("run %s has no manifest (status.manifestURL): its stage-out has not completed", run.Name)
	}
	if _, q, _ := strings.Cut(v1.StageURLWithS3(so.URL, run.Spec.Policy.S3), "?"); q != "" {
		if _, err := url.ParseQuery(q); err == nil {
			prefix += "?" + q
		}
	}
	return prefix, nil
}
