package stageout

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// StepLogsOptions configure an archive of a defer pod's defer containers'
// logs (kdefer-stage logs, the stage-logs sidecar).
type StepLogsOptions struct {
	// To is the stage-out's destination URL (templates already expanded).
	To string
	// Logs.Source serves the defer containers' logs (a LogClient with
	// Steps set); Logs.Pod names the defer pod; Logs.Self is the
	// sidecar's own log.
	Logs Logs
	storage.TransferOptions
}

// ArchiveStepLogs stores the logs the source lists, and the sidecar's own,
// under To's _kdefer/logs/POD/, then lists them, with a warning for each
// log it could not fetch, at stagecontract.StepLogsKey(POD): after the
// logs it lists, as the manifest is after the files. It never touches the
// manifest, which the stage-out step wrote as its commit marker before
// these steps ran. Only a store error fails it.
func ArchiveStepLogs(ctx context.Context, o StepLogsOptions) (storage.TransferResult, error) {
	o.TransferOptions = o.TransferOptions.WithDefaults()
	if o.Logs.Pod == "" {
		return storage.TransferResult{}, storage.Usagef("archive the steps' logs: no defer pod named (%s)", stagecontract.EnvLogsSelf)
	}
	loc, err := storage.ParseURL(o.To)
	if err != nil {
		return storage.TransferResult{}, err
	}
	be := o.Backend
	if be == nil {
		be, err = storage.Open(ctx, loc, storage.OpenOptions{Concurrency: 1, IdleTimeout: o.IdleTimeout})
		if err != nil {
			return storage.TransferResult{}, err
		}
		defer be.Close()
	}
	e := &engine{o: Options{To: o.To, Logs: o.Logs, Env: os.LookupEnv, TransferOptions: o.TransferOptions}, be: be, prefix: loc.Prefix}
	logs, warnings, err := e.archiveLogs(ctx)
	if err != nil {
		return storage.TransferResult{}, err
	}
	list := stagecontract.StepLogs{Version: stagecontract.ManifestVersion, Pod: o.Logs.Pod, Logs: logs, LogWarnings: warnings}
	if list.Logs == nil {
		list.Logs = []stagecontract.ManifestFile{}
	}
	data, err := json.MarshalIndent(list, "", " ")
	if err != nil {
		return storage.TransferResult{}, fmt.Errorf("encode the steps' logs list: %w", err)
	}
	key := loc.Prefix + stagecontract.StepLogsKey(o.Logs.Pod)
	err = o.Retry.Do(ctx, func(ctx context.Context) error {
		_, err := be.Put(ctx, key, bytes.NewReader(data), int64(len(data)), storage.PutOptions{ContentType: "application/json"})
		return err
	})
	if err != nil {
		return storage.TransferResult{}, storage.WithOp("store the steps' logs list", err)
	}
	var n int64
	for _, l := range logs {
		n += l.Size
	}
	return storage.TransferResult{Bytes: n, Objects: int64(len(logs)) + 1, ManifestURL: loc.KeyURL(key),
		Logs: int64(len(logs)), LogWarnings: summaryLogWarnings(warnings)}, nil
}
