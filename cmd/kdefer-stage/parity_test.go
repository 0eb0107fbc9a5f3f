package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/stagecontract"
)

// Each test here failed on the code before issue #16 item 5: the flags did
// not exist (exit 2) or an empty selection passed silently.

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshot returns every file under dir with its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			data, _ := os.ReadFile(p)
			out[p] = string(data)
		}
		return nil
	})
	return out
}

func TestCLIDryRun(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	writeTree(t, src, map[string]string{"a/x.root": "hello", "b.log": "world!"})
	store := filepath.Join(dst, "store")

	// Nothing stored yet: both would be uploaded, and not even the
	// directory is created.
	code, s, stderr := runCLI(t, "out", "--dry-run", "--from", src, "--to", "file://"+store)
	if code != 0 || s.Objects != 2 || s.Bytes != 11 || s.ManifestURL != "" {
		t.Fatalf("out --dry-run: exit %d summary %+v\n%s", code, s, stderr)
	}
	if strings.Count(stderr, `"would upload"`) != 2 {
		t.Errorf("out --dry-run logs %d would-upload lines, want 2:\n%s", strings.Count(stderr, `"would upload"`), stderr)
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Fatalf("out --dry-run created %s: %v", store, err)
	}

	if code, _, stderr := runCLI(t, "out", "--from", src, "--to", "file://"+store); code != 0 {
		t.Fatalf("out: exit %d\n%s", code, stderr)
	}
	writeTree(t, src, map[string]string{"b.log": "changed"})
	before := snapshot(t, store)
	code, s, stderr = runCLI(t, "out", "--dry-run", "--from", src, "--to", "file://"+store)
	if code != 0 || s.Objects != 1 || s.Skipped != 1 || s.Bytes != 7 {
		t.Fatalf("out --dry-run after a run: exit %d summary %+v\n%s", code, s, stderr)
	}
	if !strings.Contains(stderr, `"would skip (stored)"`) {
		t.Errorf("out --dry-run does not log the skipped file:\n%s", stderr)
	}
	if after := snapshot(t, store); len(after) != len(before) || after[filepath.Join(store, stagecontract.ManifestKey)] != before[filepath.Join(store, stagecontract.ManifestKey)] || after[filepath.Join(store, "b.log")] != "world!" {
		t.Errorf("out --dry-run changed the store:\nbefore %v\nafter  %v", before, after)
	}

	// Stage-in: nothing written, the destination not even created; a
	// present file is reported as skipped.
	in := filepath.Join(dst, "in")
	code, s, stderr = runCLI(t, "in", "--dry-run", "--from", "file://"+store+"/", "--to", in)
	if code != 0 || s.Objects != 2 || s.Bytes != 11 {
		t.Fatalf("in --dry-run: exit %d summary %+v\n%s", code, s, stderr)
	}
	if _, err := os.Stat(in); !os.IsNotExist(err) {
		t.Fatalf("in --dry-run created %s: %v", in, err)
	}
	writeTree(t, in, map[string]string{"a/x.root": "hello"})
	code, s, stderr = runCLI(t, "in", "--dry-run", "--from", "file://"+store+"/_kdefer/manifest.json", "--to", in)
	if code != 0 || s.Objects != 1 || s.Skipped != 1 {
		t.Fatalf("in --dry-run with one file present: exit %d summary %+v\n%s", code, s, stderr)
	}
	if got := snapshot(t, in); len(got) != 1 {
		t.Errorf("in --dry-run wrote files: %v", got)
	}
}

func TestCLIInFilters(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	writeTree(t, src, map[string]string{"a/x.root": "1", "a/y.log": "22", "c.txt": "333", "tmp/z.root": "4444"})
	store := "file://" + filepath.Join(dst, "store") + "/"
	if code, _, stderr := runCLI(t, "out", "--from", src, "--to", store); code != 0 {
		t.Fatalf("out: exit %d\n%s", code, stderr)
	}
	for _, from := range []string{store, store + stagecontract.ManifestKey} {
		in := t.TempDir()
		code, s, stderr := runCLI(t, "in", "--from", from, "--to", in, "--include", "**/*.{root,log}", "--exclude", "tmp/**")
		if code != 0 || s.Objects != 2 {
			t.Fatalf("in %s with filters: exit %d summary %+v\n%s", from, code, s, stderr)
		}
		got := snapshot(t, in)
		if len(got) != 2 || got[filepath.Join(in, "a/x.root")] != "1" || got[filepath.Join(in, "a/y.log")] != "22" {
			t.Errorf("in %s with filters wrote %v, want a/x.root and a/y.log", from, got)
		}
	}
	code, _, stderr := runCLI(t, "in", "--from", store, "--to", t.TempDir(), "--include", "*.nothing")
	if code != stagecontract.ExitPermanent || !strings.Contains(stderr, "matches the include/exclude globs") {
		t.Errorf("in with a glob matching nothing: exit %d, want %d and a clear error:\n%s", code, stagecontract.ExitPermanent, stderr)
	}
}

func TestCLINoFiles(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	writeTree(t, src, map[string]string{"a.txt": "x"})
	to := "file://" + dst + "/out"
	code, _, stderr := runCLI(t, "out", "--from", src, "--to", to, "--include", "**/*.root")
	if code != 0 || !strings.Contains(stderr, `"level":"warn"`) || !strings.Contains(stderr, "upload nothing") {
		t.Errorf("out choosing no file: exit %d, want 0 with a warning:\n%s", code, stderr)
	}
	code, s, stderr := runCLI(t, "out", "--from", src, "--to", to, "--include", "**/*.root", "--require-files")
	if code != stagecontract.ExitPermanent || !strings.Contains(s.Error, "nothing to upload") {
		t.Errorf("out --require-files choosing no file: exit %d summary %+v, want %d:\n%s", code, s, stagecontract.ExitPermanent, stderr)
	}
}
