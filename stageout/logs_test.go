package stageout_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/s3server"
)

// logEndpoint is an HTTPS server speaking the logs contract, as
// kdefer-controller does, with the logs given (key "CONTAINER" or
// "CONTAINER previous"); a log it lists but does not have answers 404.
func logEndpoint(t *testing.T, token string, idx stagecontract.LogsIndex, logs map[string]string) (url, caPEM string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		c := r.URL.Query().Get("container")
		if c == "" {
			_ = json.NewEncoder(w).Encode(idx)
			return
		}
		if r.URL.Query().Get("previous") == "true" {
			c += " previous"
		}
		body, ok := logs[c]
		if !ok {
			http.Error(w, "previous terminated container not found", http.StatusNotFound)
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv.URL + stagecontract.LogsPath, string(ca)
}

// The pod's logs are stored under _kdefer/logs/POD/ before the manifest,
// which lists each with its size and checksum; a long log keeps its tail;
// a log the endpoint cannot serve is left out without failing the outputs.
func TestStageOutArchivesLogs(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "logs")
	src := t.TempDir()
	stagetest.MakeTree(t, src, stagetest.Tree{"out.txt": []byte("result")})
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 300) + "the end\n"
	idx := stagecontract.LogsIndex{Pod: "job-abc", Logs: []stagecontract.LogRef{
		{Container: "init"}, {Container: "main"}, {Container: "main", Previous: true}, {Container: "gone"}}}
	url, ca := logEndpoint(t, "tok-123", idx, map[string]string{
		"init": "init ok\n", "main": long, "main previous": "first attempt died\n"})
	lc, err := stageout.NewLogClient(url, ca, tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	u := s3server.S3URL(srv.Addr(), "logs", "run/")
	o := opts(src, u, 3)
	o.Logs = stageout.Logs{Source: lc, MaxBytes: 100}
	res, err := stageout.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	want := map[string]string{
		"_kdefer/logs/job-abc/init.log":          "init ok\n",
		"_kdefer/logs/job-abc/main.log":          long[len(long)-100:],
		"_kdefer/logs/job-abc/main.previous.log": "first attempt died\n",
	}
	loc, _ := storage.ParseURL(u)
	be, err := storage.Open(context.Background(), loc, storage.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	m, err := storage.ReadManifest(context.Background(), be, loc.Prefix+stagecontract.ManifestKey, storage.DefaultRetry())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Logs) != len(want) {
		t.Fatalf("manifest logs = %+v, want %d entries", m.Logs, len(want))
	}
	for _, l := range m.Logs {
		body, ok := want[l.Key]
		if !ok {
			t.Errorf("manifest lists %s, not a log the endpoint served", l.Key)
			continue
		}
		rc, _, err := be.NewReader(context.Background(), loc.Prefix+l.Key, 0, -1)
		if err != nil {
			t.Fatalf("read %s: %v", l.Key, err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != body {
			t.Errorf("%s = %q, want %q", l.Key, got, body)
		}
		sum := storage.FormatChecksum(crc32.Checksum(got, crc32.MakeTable(crc32.Castagnoli)))
		if l.Size != int64(len(got)) || l.Checksum != sum {
			t.Errorf("%s: manifest size %d checksum %s, stored %d %s", l.Key, l.Size, l.Checksum, len(got), sum)
		}
	}
	if len(m.Files) != 1 || m.Files[0].Key != "out.txt" || res.Objects != 1 {
		t.Errorf("files = %+v, objects %d: the logs must not count as outputs", m.Files, res.Objects)
	}
}

// A wrong token, or an endpoint that is down, leaves the logs out and the
// outputs stored: the logs are a record, not the run's purpose.
func TestStageOutLogsUnreachable(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "logs")
	src := t.TempDir()
	stagetest.MakeTree(t, src, stagetest.Tree{"out.txt": []byte("result")})
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("stolen"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, ca := logEndpoint(t, "tok-123", stagecontract.LogsIndex{Pod: "p", Logs: []stagecontract.LogRef{{Container: "main"}}}, map[string]string{"main": "secret\n"})
	lc, err := stageout.NewLogClient(url, ca, tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	u := s3server.S3URL(srv.Addr(), "logs", "run/")
	o := opts(src, u, 3)
	o.Logs = stageout.Logs{Source: lc}
	res, err := stageout.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	if res.Manifest == nil || len(res.Manifest.Logs) != 0 {
		t.Errorf("manifest logs = %+v, want none: the endpoint refused the token", res.Manifest)
	}
	for _, k := range objects(t, u) {
		if strings.HasPrefix(k, stagecontract.LogsDir) {
			t.Errorf("stored %s although the endpoint refused the token", k)
		}
	}
}

// A name that is not a Kubernetes name never becomes a key.
func TestLogClientRefusesBadURL(t *testing.T) {
	if _, err := stageout.NewLogClient("http://kdefer-webhook/x", "", "/t"); err == nil {
		t.Error("plain http accepted: the token would cross the network in the clear")
	}
}
