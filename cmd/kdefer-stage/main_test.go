package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/test/s3server"
)

func runCLI(t *testing.T, args ...string) (int, stagecontract.StageSummary, string) {
	t.Helper()
	sum := filepath.Join(t.TempDir(), "summary.json")
	var stderr bytes.Buffer
	code := run(append(args, "--summary-file", sum, "--log-format", "json"), &stderr)
	var s stagecontract.StageSummary
	if data, err := os.ReadFile(sum); err == nil {
		if len(data) > 1024 {
			t.Errorf("summary is %d bytes; it must stay far below the 4096-byte termination message limit", len(data))
		}
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatalf("summary %q: %v", data, err)
		}
	}
	return code, s, stderr.String()
}

func TestCLIFile(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"a/b/c.txt": "hello", "top.txt": "world!", "skip.tmp": "x"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KDEFER_JOB", "job-1")
	t.Setenv("KDEFER_POD", "job-1-xyz")
	to := "file://" + dst + "/runs/{job}/{pod}"
	code, s, stderr := runCLI(t, "out", "--from", src, "--to", to, "--exclude", "*.tmp")
	want := stagecontract.StageSummary{Op: "out", Bytes: 11, Objects: 2, TotalBytes: 11, ManifestURL: "file://" + dst + "/runs/job-1/job-1-xyz/_kdefer/manifest.json"}
	if diff := cmp.Diff(want, s, cmpopts.IgnoreFields(stagecontract.StageSummary{}, "DurationSeconds")); code != 0 || diff != "" {
		t.Fatalf("out: exit %d, summary (-want +got):\n%s\nstderr:\n%s", code, diff, stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("stderr line is not JSON: %q", line)
		}
	}
	code, s, _ = runCLI(t, "in", "--from", want.ManifestURL, "--to", filepath.Join(dst, "in"))
	if code != 0 || s.Objects != 2 || s.Bytes != 11 {
		t.Fatalf("in: exit %d summary %+v", code, s)
	}
	got, err := os.ReadFile(filepath.Join(dst, "in/a/b/c.txt"))
	if err != nil || string(got) != "hello" {
		t.Errorf("staged-in file: %q, %v", got, err)
	}
	code, s, _ = runCLI(t, "in", "--from", want.ManifestURL, "--to", filepath.Join(dst, "in"))
	if code != 0 || s.Skipped != 2 || s.Objects != 0 {
		t.Errorf("in rerun: exit %d summary %+v, want 2 skipped", code, s)
	}
}

func TestCLIExitCodes(t *testing.T) {
	src := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "super-secret-value")
	// A volume whose way to the source the job blocked.
	vol := t.TempDir()
	if err := os.Symlink(src, filepath.Join(vol, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(vol, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A prefix a stage-out left before its manifest.
	uncommitted := t.TempDir()
	if err := os.MkdirAll(filepath.Join(uncommitted, stagecontract.LogsDir, "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a.txt", stagecontract.LogsDir + "p/main.log"} {
		if err := os.WriteFile(filepath.Join(uncommitted, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		args  []string
		code  int
		class string
		says  string
	}{
		{"missing flag", []string{"out", "--from", src}, stagecontract.ExitUsage, "", ""},
		{"unknown command", []string{"sideways"}, stagecontract.ExitUsage, "", ""},
		{"bad glob", []string{"out", "--from", src, "--to", "mem://b/p", "--include", "a["}, stagecontract.ExitUsage, "usage", "unterminated"},
		{"credentials in URL", []string{"out", "--from", src, "--to", "s3://AKID:super-secret-value@bucket/p"}, stagecontract.ExitPermanent, "permanent", "credentials"},
		{"unknown parameter", []string{"out", "--from", src, "--to", "s3://b/p?endpont=http://127.0.0.1:1"}, stagecontract.ExitPermanent, "permanent", `"endpont"`},
		{"unset template variable", []string{"out", "--from", src, "--to", "s3://b/{pod}"}, stagecontract.ExitPermanent, "permanent", "KDEFER_POD"},
		{"missing source", []string{"out", "--from", filepath.Join(src, "nope"), "--to", "mem://b/p"}, stagecontract.ExitPermanent, "permanent", "--from"},
		{"source through a link", []string{"out", "--volume-root", vol, "--from", filepath.Join(vol, "link"), "--to", "mem://b/p"}, stagecontract.ExitPermanent, "permanent", "symbolic link"},
		{"source a FIFO", []string{"out", "--volume-root", vol, "--from", filepath.Join(vol, "pipe"), "--to", "mem://b/p"}, stagecontract.ExitPermanent, "permanent", "FIFO"},
		{"source outside the volume", []string{"out", "--volume-root", vol, "--from", src, "--to", "mem://b/p"}, stagecontract.ExitUsage, "usage", "not inside"},
		{"server down", []string{"out", "--from", src, "--to", "s3://bkt/p?endpoint=http://127.0.0.1:1", "--attempts", "2"}, stagecontract.ExitTransient, "transient", ""},
		{"empty input prefix", []string{"in", "--from", "mem://b/p", "--to", filepath.Join(src, "in")}, stagecontract.ExitPermanent, "permanent", "no objects"},
		{"uncommitted input prefix", []string{"in", "--from", "file://" + uncommitted, "--to", filepath.Join(src, "in")}, stagecontract.ExitPermanent, "permanent", "--allow-uncommitted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KDEFER_POD", "")
			os.Unsetenv("KDEFER_POD")
			code, s, stderr := runCLI(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			if s.ErrorClass != tc.class {
				t.Errorf("summary errorClass %q, want %q", s.ErrorClass, tc.class)
			}
			if !strings.Contains(s.Error, tc.says) {
				t.Errorf("summary error %q does not say %q", s.Error, tc.says)
			}
			if strings.Contains(stderr+s.Error, "super-secret-value") {
				t.Errorf("a credential leaked:\n%s\n%s", stderr, s.Error)
			}
		})
	}
}

// The prefix a stage-out committed is staged in from its manifest: a byte
// flipped in an output after the commit fails the stage-in (exit 3), naming
// the object and both checksums; intact, the summary names the committer.
func TestCLICommittedInputs(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	data := bytes.Repeat([]byte("output "), 100)
	if err := os.WriteFile(filepath.Join(src, "out.txt"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KDEFER_POD", "producer-0")
	t.Setenv("KDEFER_UID", "uid-7")
	t.Setenv("KDEFER_TRIGGER", "Evicted")
	if code, s, stderr := runCLI(t, "out", "--from", src, "--to", "file://"+dst); code != 0 {
		t.Fatalf("out: exit %d summary %+v\n%s", code, s, stderr)
	}
	code, s, stderr := runCLI(t, "in", "--from", "file://"+dst, "--to", filepath.Join(t.TempDir(), "in"))
	want := &stagecontract.Committer{Pod: "producer-0", UID: "uid-7", Trigger: "Evicted"}
	if code != 0 || s.ManifestURL != "file://"+dst+"/"+stagecontract.ManifestKey || !cmp.Equal(s.CommittedBy, want) {
		t.Errorf("in: exit %d summary %+v committedBy %+v, want the manifest and %+v\n%s", code, s, s.CommittedBy, want, stderr)
	}
	if !strings.Contains(stderr, `"identity":{`) || !strings.Contains(stderr, `"uid":"uid-7"`) {
		t.Errorf("in's log does not name the manifest's identity:\n%s", stderr)
	}

	bad := bytes.Clone(data)
	bad[10] ^= 1
	if err := os.WriteFile(filepath.Join(dst, "out.txt"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	code, s, stderr = runCLI(t, "in", "--from", "file://"+dst, "--to", filepath.Join(t.TempDir(), "in"))
	if code != stagecontract.ExitPermanent || s.ErrorClass != "permanent" {
		t.Fatalf("in of a damaged output: exit %d summary %+v, want exit %d\n%s", code, s, stagecontract.ExitPermanent, stderr)
	}
	for _, say := range []string{`"out.txt"`, fmt.Sprintf("crc32c:%08x", crc32.Checksum(bad, crc32.MakeTable(crc32.Castagnoli))),
		fmt.Sprintf("crc32c:%08x", crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))} {
		if !strings.Contains(s.Error, say) {
			t.Errorf("summary error %q does not say %s", s.Error, say)
		}
	}
}

func TestCLIMinIO(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "cli")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f.dat"), bytes.Repeat([]byte("x"), 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	code, s, stderr := runCLI(t, "out", "--from", src, "--to", srv.URL("cli", "run/"))
	if code != 0 || s.Objects != 1 || s.ManifestURL != "s3://cli/run/_kdefer/manifest.json" {
		t.Fatalf("out: exit %d summary %+v\n%s", code, s, stderr)
	}
	if strings.Contains(stderr, s3server.SecretKey) {
		t.Errorf("stderr holds the secret key")
	}
	code, s, _ = runCLI(t, "out", "--from", src, "--to", srv.URL("nobucket", "run/"))
	if code != stagecontract.ExitPermanent || !strings.Contains(s.Error, "NoSuchBucket") {
		t.Errorf("missing bucket: exit %d summary %+v", code, s)
	}
}

func TestVersionOf(t *testing.T) {
	info := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: settings}, true }
	}
	cases := map[string]struct {
		info func() (*debug.BuildInfo, bool)
		want string
	}{
		"no build info": {info: func() (*debug.BuildInfo, bool) { return nil, false }, want: "v0.1.0"},
		"no vcs":        {info: info(), want: "v0.1.0"},
		"clean tree": {info: info(debug.BuildSetting{Key: "vcs.revision", Value: "d290e3c5b1a2f00112233445566778899aabbccd"},
			debug.BuildSetting{Key: "vcs.modified", Value: "false"}), want: "v0.1.0+d290e3c5b1a2"},
		"modified tree": {info: info(debug.BuildSetting{Key: "vcs.revision", Value: "d290e3c5b1a2f00112233445566778899aabbccd"},
			debug.BuildSetting{Key: "vcs.modified", Value: "true"}), want: "v0.1.0+d290e3c5b1a2.dirty"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, versionOf("v0.1.0", tc.info)); diff != "" {
				t.Errorf("versionOf (-want +got):\n%s", diff)
			}
		})
	}
}

// A file stage-out cannot store (here a FIFO) is counted in the summary and
// the run still exits 0: every good byte is saved, the controller reads
// Unsaved to mark the run incomplete.
func TestCLIUnsaved(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "good.txt"), []byte("good"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, s, stderr := runCLI(t, "out", "--from", src, "--to", "file://"+dst)
	want := stagecontract.StageSummary{Op: "out", Bytes: 4, Objects: 1, TotalBytes: 4, Unsaved: 1, ManifestURL: "file://" + dst + "/_kdefer/manifest.json"}
	if diff := cmp.Diff(want, s, cmpopts.IgnoreFields(stagecontract.StageSummary{}, "DurationSeconds")); code != 0 || diff != "" {
		t.Fatalf("out: exit %d, summary (-want +got):\n%s\nstderr:\n%s", code, diff, stderr)
	}
}
