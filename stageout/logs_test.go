package stageout_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/s3server"
)

// logEndpoint is an HTTPS server speaking the logs contract, as
// kdefer-controller does, with the logs given (key "CONTAINER" or
// "CONTAINER previous"); a log it lists but does not have answers 404. An
// index of a defer pod (POD-defer) is served for steps=true requests only,
// any other for requests without it.
func logEndpoint(t *testing.T, token string, idx stagecontract.LogsIndex, logs map[string]string) (url, caPEM string) {
	t.Helper()
	srv := httptest.NewTLSServer(logHandler(token, idx, logs))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv.URL + stagecontract.LogsPath, string(ca)
}

// logHandler is logEndpoint's handler.
func logHandler(token string, idx stagecontract.LogsIndex, logs map[string]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		if steps := r.URL.Query().Get(stagecontract.LogsStepsParam) == "true"; steps != strings.HasSuffix(idx.Pod, "-defer") {
			http.Error(w, "not the logs this pod's index is about", http.StatusBadRequest)
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
	})
}

// logsStageOut sets up a stage-out that archives logs: a MinIO with the
// bucket "logs", whose URL it returns (prefix run/), a work directory holding
// out.txt, and a token file holding token.
func logsStageOut(t *testing.T, token string) (u, src, tokenFile string) {
	t.Helper()
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "logs")
	src = t.TempDir()
	stagetest.MakeTree(t, src, stagetest.Tree{"out.txt": []byte("result")})
	tokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return s3server.S3URL(srv.Addr(), "logs", "run/"), src, tokenFile
}

// The pod's logs are stored under _kdefer/logs/POD/ before the manifest,
// which lists each with its size and checksum; a long log keeps its head
// and tail, and its entry says so;
// a log the endpoint cannot serve is left out without failing the outputs,
// and named with its reason.
func TestStageOutArchivesLogs(t *testing.T) {
	u, src, tokenFile := logsStageOut(t, "tok-123\n")
	long := strings.Repeat("x", 300) + "the end\n"
	idx := stagecontract.LogsIndex{Pod: "job-abc", Logs: []stagecontract.LogRef{
		{Container: "init"}, {Container: "main"}, {Container: "main", Previous: true}, {Container: "gone"}}}
	url, ca := logEndpoint(t, "tok-123", idx, map[string]string{
		"init": "init ok\n", "main": long, "main previous": "first attempt died\n"})
	lc, err := stageout.NewLogClient(url, ca, "", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	o := opts(src, u, 3)
	// The step's own log, as kdefer-stage tees it (stagecontract.EnvLogsSelf).
	self := stageout.SelfLogFromEnv(func(k string) (string, bool) {
		return map[string]string{stagecontract.EnvLogsSelf: "job-abc-defer/stage-out", stagecontract.EnvLogsMaxBytes: "4096"}[k], true
	})
	if self == nil {
		t.Fatal("no self log from the environment")
	}
	o.Log = zerolog.New(self.Tail)
	o.Logs = stageout.Logs{Source: lc, MaxBytes: 100, Self: self}
	res, err := stageout.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	want := map[string]string{
		"_kdefer/logs/job-abc/init.log":            "init ok\n",
		"_kdefer/logs/job-abc/main.log":            long[:25] + stagecontract.LogTruncationMarker(int64(len(long))-100, 100) + long[len(long)-75:],
		"_kdefer/logs/job-abc/main.previous.log":   "first attempt died\n",
		"_kdefer/logs/job-abc-defer/stage-out.log": "", // checked below
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
		if strings.HasSuffix(l.Key, "/stage-out.log") {
			// The step's own log, up to the manifest: the skipped log's
			// warning included.
			if !strings.Contains(string(got), `"container":"gone"`) || !strings.Contains(string(got), "start stage-out") {
				t.Errorf("%s = %q, want the step's log with its warning", l.Key, got)
			}
		} else if string(got) != body {
			t.Errorf("%s = %q, want %q", l.Key, got, body)
		}
		cut := stagecontract.LogTruncation{OriginalSize: int64(len(long)), HeadBytes: 25, TailBytes: 75}
		if l.Key == "_kdefer/logs/job-abc/main.log" && (l.Truncated == nil || *l.Truncated != cut) {
			t.Errorf("%s: truncated = %+v, want %+v", l.Key, l.Truncated, cut)
		} else if l.Key != "_kdefer/logs/job-abc/main.log" && l.Truncated != nil {
			t.Errorf("%s: truncated = %+v, but it is whole", l.Key, l.Truncated)
		}
		sum := storage.FormatChecksum(crc32.Checksum(got, crc32.MakeTable(crc32.Castagnoli)))
		if l.Size != int64(len(got)) || l.Checksum != sum {
			t.Errorf("%s: manifest size %d checksum %s, stored %d %s", l.Key, l.Size, l.Checksum, len(got), sum)
		}
	}
	if len(m.Files) != 1 || m.Files[0].Key != "out.txt" || res.Objects != 1 {
		t.Errorf("files = %+v, objects %d: the logs must not count as outputs", m.Files, res.Objects)
	}
	// The log the endpoint listed but could not serve (an evicted pod's,
	// whose containers the kubelet removed) is named with the endpoint's
	// reason, in the manifest and the summary, never silently absent.
	if len(m.LogWarnings) != 1 || m.LogWarnings[0].Pod != "job-abc" || m.LogWarnings[0].Container != "gone" ||
		!strings.Contains(m.LogWarnings[0].Reason, "previous terminated container not found") {
		t.Errorf("manifest logWarnings = %+v, want one for container gone with the endpoint's reason", m.LogWarnings)
	}
	if res.Logs != 4 || len(res.LogWarnings) != 1 || res.LogWarnings[0].Container != "gone" {
		t.Errorf("result logs %d, warnings %+v: want 4 and the one for gone", res.Logs, res.LogWarnings)
	}
}

// A wrong token, or an endpoint that is down, leaves the logs out and the
// outputs stored: the logs are a record, not the run's purpose; the
// manifest says why they are missing.
func TestStageOutLogsUnreachable(t *testing.T) {
	u, src, tokenFile := logsStageOut(t, "stolen")
	url, ca := logEndpoint(t, "tok-123", stagecontract.LogsIndex{Pod: "p", Logs: []stagecontract.LogRef{{Container: "main"}}}, map[string]string{"main": "secret\n"})
	lc, err := stageout.NewLogClient(url, ca, "", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	o := opts(src, u, 3)
	o.Logs = stageout.Logs{Source: lc}
	res, err := stageout.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	if res.Manifest == nil || len(res.Manifest.Logs) != 0 {
		t.Fatalf("manifest logs = %+v, want none: the endpoint refused the token", res.Manifest)
	}
	// Nothing could be listed: one warning for the pod, with the reason.
	if w := res.Manifest.LogWarnings; len(w) != 1 || w[0].Container != "" || !strings.Contains(w[0].Reason, "401") {
		t.Errorf("manifest logWarnings = %+v, want one naming the refusal (401)", w)
	}
	if len(res.LogWarnings) != 1 {
		t.Errorf("summary warnings = %+v, want the one", res.LogWarnings)
	}
	for _, k := range objects(t, u) {
		if strings.HasPrefix(k, stagecontract.LogsDir) {
			t.Errorf("stored %s although the endpoint refused the token", k)
		}
	}
}

// A logs endpoint that is not up yet (the node agent restarting with its
// node, which a resumed defer pod can outrun) is asked again: a refused
// connection and a 503 are retried and every log is archived, none replaced
// by a warning; a log the endpoint says it does not have (404) is asked for
// once, and named.
func TestStageOutLogsEndpointRestarting(t *testing.T) {
	u, src, tokenFile := logsStageOut(t, "tok-123")
	idx := stagecontract.LogsIndex{Pod: "p", Logs: []stagecontract.LogRef{{Container: "main"}, {Container: "main", Previous: true}}}
	var mu sync.Mutex
	asked := map[string]int{}
	h := logHandler("tok-123", idx, map[string]string{"main": "the evidence\n"})
	endpoint := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("container") + " " + r.URL.Query().Get("previous")
		mu.Lock()
		asked[q]++
		n := asked[q]
		mu.Unlock()
		if q == "main " && n == 1 {
			http.Error(w, "kubelet not ready", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(endpoint.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: endpoint.Certificate().Raw})

	// The client asks an address nothing listens on until the first retry,
	// when the endpoint starts serving there too, with the same certificate.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var once sync.Once
	up := func() {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen on %s: %v", addr, err)
			return
		}
		late := &http.Server{Handler: endpoint.Config.Handler, TLSConfig: endpoint.TLS.Clone(), ReadHeaderTimeout: time.Minute}
		go func() { _ = late.ServeTLS(l, "", "") }()
		t.Cleanup(func() { _ = late.Close() })
	}
	lc, err := stageout.NewLogClient("https://"+addr+stagecontract.LogsPath, string(ca), "", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	o := opts(src, u, 5)
	refused := 0
	o.Retry.OnRetry = func(_ int, _ time.Duration, err error) {
		if errors.Is(err, syscall.ECONNREFUSED) {
			refused++
		}
		once.Do(up)
	}
	o.Logs = stageout.Logs{Source: lc}
	res, err := stageout.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	if refused != 1 {
		t.Errorf("%d refused connections retried, want 1 (the endpoint not up yet)", refused)
	}
	if res.Manifest == nil || len(res.Manifest.Logs) != 1 || res.Manifest.Logs[0].Key != "_kdefer/logs/p/main.log" {
		t.Fatalf("manifest logs = %+v, want main's", res.Manifest)
	}
	if w := res.Manifest.LogWarnings; len(w) != 1 || !w[0].Previous || !strings.Contains(w[0].Reason, "404") {
		t.Errorf("manifest logWarnings = %+v, want one: the previous log the endpoint does not have (404)", w)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked["main "] != 2 || asked["main true"] != 1 {
		t.Errorf("asked %v: want main's log twice (a 503, then served) and the missing previous one once", asked)
	}
}

// A name that is not a Kubernetes name never becomes a key.
func TestLogClientRefusesBadURL(t *testing.T) {
	if _, err := stageout.NewLogClient("http://kdefer-webhook/x", "", "", "/t"); err == nil {
		t.Error("plain http accepted: the token would cross the network in the clear")
	}
}

// A pod with many containers whose logs are all gone still gets a summary
// the kubelet keeps whole: at most four warnings, each reason cut.
func TestSummaryLogWarningsBounded(t *testing.T) {
	var ws []stagecontract.LogWarning
	for i := range 20 {
		ws = append(ws, stagecontract.LogWarning{Pod: strings.Repeat("p", 63), Container: strings.Repeat("c", 62) + string(rune('a'+i)),
			Previous: true, Reason: strings.Repeat("é", 3000)})
	}
	got := stageout.SummaryLogWarnings(ws)
	if len(got) != stagecontract.MaxSummaryLogWarnings || got[0].Container != ws[0].Container {
		t.Fatalf("kept %d warnings, want the first %d", len(got), stagecontract.MaxSummaryLogWarnings)
	}
	s := stagecontract.StageSummary{Op: "out", Error: strings.Repeat("e", 1024), ManifestURL: "s3://" + strings.Repeat("b", 1024), LogWarnings: got}
	data, _ := json.Marshal(s)
	if len(data) >= 4096 {
		t.Errorf("summary with warnings is %d bytes, the kubelet keeps 4096", len(data))
	}
	if ws[0].Reason != strings.Repeat("é", 3000) {
		t.Error("the manifest's warnings were cut too")
	}
	if stageout.SummaryLogWarnings(nil) != nil {
		t.Error("no warnings became a non-nil list")
	}
}

// The step's own log keeps its tail when it outgrows the cap.
func TestTailWriter(t *testing.T) {
	w := stageout.NewTailWriter(10)
	for i := range 100 {
		fmt.Fprintf(w, "%02d|", i)
	}
	got, cut := w.Tail()
	if string(got) != "|97|98|99|" || !cut {
		t.Errorf("tail = %q (cut %v), want the last 10 bytes, cut", got, cut)
	}
	w = stageout.NewTailWriter(10)
	_, _ = io.WriteString(w, "short")
	if got, cut := w.Tail(); string(got) != "short" || cut {
		t.Errorf("tail = %q (cut %v), want all of it", got, cut)
	}
}

// The stage-logs sidecar's archive: the defer containers' logs the
// endpoint serves for steps=true, its own log, and then the list of them
// at StepLogsKey, with a warning for the log it could not fetch; the
// manifest the stage-out wrote is left as it was.
func TestArchiveStepLogs(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "logs")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	idx := stagecontract.LogsIndex{Pod: "job-abc-defer", Logs: []stagecontract.LogRef{
		{Container: "flaky"}, {Container: "flaky", Previous: true}, {Container: "gone"}}}
	url, ca := logEndpoint(t, "tok", idx, map[string]string{"flaky": "attempt 3\n", "flaky previous": "attempt 2\n"})
	lc, err := stageout.NewLogClient(url, ca, "", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	lc.Steps = true // logEndpoint answers a POD-defer index for steps=true only
	u := s3server.S3URL(srv.Addr(), "logs", "run/")
	src := t.TempDir()
	stagetest.MakeTree(t, src, stagetest.Tree{"out.txt": []byte("result")})
	if _, err := stageout.Run(context.Background(), opts(src, u, 3)); err != nil {
		t.Fatal(err)
	}
	before := objectBytes(t, u, stagecontract.ManifestKey)

	self := stageout.SelfLogFromEnv(func(k string) (string, bool) {
		return map[string]string{stagecontract.EnvLogsSelf: "job-abc-defer/stage-logs"}[k], true
	})
	_, _ = io.WriteString(self.Tail, "sidecar started\n")
	o := opts(src, u, 3)
	res, err := stageout.ArchiveStepLogs(context.Background(), stageout.StepLogsOptions{To: u,
		Logs: stageout.Logs{Source: lc, Pod: self.Pod, Self: self}, TransferOptions: o.TransferOptions})
	if err != nil {
		t.Fatalf("archive: %v", err)
	}
	var list stagecontract.StepLogs
	if err := json.Unmarshal(objectBytes(t, u, stagecontract.StepLogsKey("job-abc-defer")), &list); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"_kdefer/logs/job-abc-defer/flaky.log":          "attempt 3\n",
		"_kdefer/logs/job-abc-defer/flaky.previous.log": "attempt 2\n",
		"_kdefer/logs/job-abc-defer/stage-logs.log":     "sidecar started\n",
	}
	if list.Pod != "job-abc-defer" || len(list.Logs) != len(want) {
		t.Fatalf("steps' list %+v, want %d logs", list, len(want))
	}
	for _, l := range list.Logs {
		got := objectBytes(t, u, l.Key)
		if string(got) != want[l.Key] || l.Size != int64(len(got)) {
			t.Errorf("%s = %q (listed size %d), want %q", l.Key, got, l.Size, want[l.Key])
		}
	}
	if len(list.LogWarnings) != 1 || list.LogWarnings[0].Container != "gone" || list.LogWarnings[0].Pod != "job-abc-defer" {
		t.Errorf("steps' list warnings %+v, want the one for gone", list.LogWarnings)
	}
	if res.Logs != 3 || len(res.LogWarnings) != 1 {
		t.Errorf("result logs %d, warnings %+v", res.Logs, res.LogWarnings)
	}
	for _, k := range objects(t, u) {
		if k == stagecontract.UncommittedKey {
			t.Errorf("the sidecar left %s: the committed prefix looks uncommitted", k)
		}
	}
	if after := objectBytes(t, u, stagecontract.ManifestKey); string(after) != string(before) {
		t.Error("the sidecar rewrote the manifest, the stage-out's commit marker")
	}
}

// objectBytes reads the object at key under the URL's prefix.
func objectBytes(t *testing.T, u, key string) []byte {
	t.Helper()
	loc, err := storage.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	be, err := storage.Open(context.Background(), loc, storage.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rc, _, err := be.NewReader(context.Background(), loc.Prefix+key, 0, -1)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A node agent is reached at its node's address, which its certificate
// does not name: the client checks the name it is given instead, and a
// certificate for another name is refused.
func TestLogClientServerName(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	idx := stagecontract.LogsIndex{Pod: "p", Logs: []stagecontract.LogRef{{Container: "main"}}}
	url, ca := logEndpoint(t, "tok", idx, map[string]string{"main": "x\n"})
	// httptest's certificate names example.com (and 127.0.0.1).
	ok, err := stageout.NewLogClient(url, ca, "example.com", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ok.Index(context.Background()); err != nil {
		t.Errorf("index with the certificate's name: %v", err)
	}
	other, err := stageout.NewLogClient(url, ca, "kdefer-node.kdefer-node.svc", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Index(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("index with another name: %v, want a certificate error", err)
	}
}
