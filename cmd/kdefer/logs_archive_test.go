package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// kdefer logs --archived prints a cut log as stored and says on stderr how
// much of it is left out, so that nobody takes it for the whole log; a
// whole log gets no note.
func TestArchivedLogsSayWhatWasCut(t *testing.T) {
	ctx := context.Background()
	prefix := "file://" + t.TempDir() + "/run/"
	be, loc := storagetest.Open(t, prefix)
	cut := "start\n" + stagecontract.LogTruncationMarker(1000, 16) + "the end\n"
	logs := []stagecontract.ManifestFile{
		{Key: "_kdefer/logs/p-0/init.log", Size: 8},
		{Key: "_kdefer/logs/p-0/main.log", Size: int64(len(cut)),
			Truncated: &stagecontract.LogTruncation{OriginalSize: 1016, HeadBytes: 6, TailBytes: 8}},
	}
	for key, body := range map[string]string{logs[0].Key: "init ok\n", logs[1].Key: cut} {
		storagetest.Put(t, be, loc.Prefix+key, []byte(body))
	}
	for i := range logs {
		logs[i].Checksum, logs[i].ModTime = storage.FormatChecksum(0), time.Now()
	}
	m := &stagecontract.Manifest{Version: stagecontract.ManifestVersion, Prefix: prefix, Files: []stagecontract.ManifestFile{}, Logs: logs}
	data, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	storagetest.Put(t, be, loc.Prefix+stagecontract.ManifestKey, data)

	run := kt.MakeRun("p-0", "ns").Obj()
	run.Spec.Policy.StageOut = &v1.StageOut{URL: prefix}
	run.Status.ManifestURL = prefix + stagecontract.ManifestKey
	var out, errb bytes.Buffer
	if err := archivedLogs(ctx, &out, &errb, run, ""); err != nil {
		t.Fatal(err)
	}
	if want := "==> p-0/init <==\ninit ok\n==> p-0/main <==\n" + cut; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
	note := "kdefer: p-0/main: 1002 of its 1016 bytes were left out (stageOut.logs.maxBytes): the first 6 and the last 8 are printed"
	if !strings.Contains(errb.String(), note) || strings.Contains(errb.String(), "p-0/init") {
		t.Errorf("stderr %q, want the note %q about main alone", errb.String(), note)
	}
}

// A run whose trigger rule sent its stage-out elsewhere reads its logs with
// that url's query (its endpoint), not stageOut.url's.
func TestRunPrefixURLOfTriggerRule(t *testing.T) {
	run := kt.MakeRun("p-0", "ns").Trigger(v1.TriggerSucceeded, 0).Obj()
	run.Spec.Policy.StageOut = &v1.StageOut{URL: "s3://b/{job}/attempts/{pod}/?endpoint=http://a:9000"}
	run.Spec.Policy.TriggerRules = []v1.TriggerRule{{Triggers: []v1.Trigger{v1.TriggerSucceeded}, URL: "s3://b/{job}/output/?endpoint=http://b:9000"}}
	run.Status.ManifestURL = "s3://b/sim/output/" + stagecontract.ManifestKey
	got, err := runPrefixURL(run)
	if want := "s3://b/sim/output/?endpoint=http://b:9000"; err != nil || got != want {
		t.Errorf("runPrefixURL = %q, %v; want %q", got, err, want)
	}
}
