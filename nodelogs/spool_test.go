package nodelogs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kdefer/kdefer/stagecontract"
)

var mainLog = stagecontract.LogRef{Container: "main"}

// The kubelet removes a stopped pod's whole log directory; the spool still
// has every byte, decoded as kubectl logs would show it.
func TestKeptAfterKubeletRemoval(t *testing.T) {
	s := newSpool(t, time.Hour)
	p := testPod("p")
	c := newContainer(t, s, p)
	c.open("0.log")
	c.line("stdout", "F", "hello world")
	c.line("stderr", "F", "warning: on stderr")
	c.line("stdout", "P", "a long line, split ")
	c.line("stdout", "F", "by the runtime")
	c.line("stdout", "F", "") // an empty line
	s.Keep(p)
	c.line("stderr", "F", "written after Keep")
	c.line("stdout", "F", "  leading spaces and a tab\tkept ")
	c.line("stdout", "P", "the last line, without a newline")
	c.close()

	if err := os.RemoveAll(filepath.Join(s.PodLogsDir, p.dirName())); err != nil {
		t.Fatal(err)
	}
	if _, err := os.OpenFile(filepath.Join(c.dir, "0.log"), os.O_WRONLY|os.O_APPEND, 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the kubelet's file is still there: %v", err)
	}
	want := "hello world\nwarning: on stderr\na long line, split by the runtime\n\n" +
		"written after Keep\n  leading spaces and a tab\tkept \nthe last line, without a newline"
	if got := c.take(); got != want {
		t.Fatalf("the test's own record: %q", got)
	}
	checkLog(t, s, p, mainLog, want)
}

// Open(Previous) is the attempt before the last, even once the kubelet
// removed its file.
func TestPreviousAttempt(t *testing.T) {
	s := newSpool(t, time.Hour)
	p := testPod("p")
	c := newContainer(t, s, p)
	s.Keep(p)
	c.open("0.log")
	c.line("stdout", "F", "attempt 0")
	c.line("stderr", "F", "crash")
	first := c.take()
	// Open links the file created since Keep before it answers.
	checkLog(t, s, p, mainLog, first)
	if _, err := openLog(t, s, p, stagecontract.LogRef{Container: "main", Previous: true}); !errors.Is(err, ErrNoLog) {
		t.Fatalf("previous of a first attempt: %v, want ErrNoLog", err)
	}

	c.open("1.log")
	c.line("stdout", "F", "attempt 1")
	second := c.take()
	prev := stagecontract.LogRef{Container: "main", Previous: true}
	checkLog(t, s, p, prev, first)
	checkLog(t, s, p, mainLog, second)

	// The kubelet keeps one dead attempt: 0.log goes once 1 is dead too.
	if err := os.Remove(filepath.Join(c.dir, "0.log")); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, p, prev, first)

	c.open("2.log")
	c.line("stdout", "F", "attempt 2")
	third := c.take()
	if err := os.Remove(filepath.Join(c.dir, "1.log")); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, p, prev, second)
	checkLog(t, s, p, mainLog, third)
}

func TestForgetAndPrune(t *testing.T) {
	s := newSpool(t, time.Hour)
	pods := []Pod{testPod("a"), testPod("b"), testPod("c")}
	for _, p := range pods {
		c := newContainer(t, s, p)
		c.open("0.log")
		c.line("stdout", "F", "I am "+p.Name)
		c.close()
		s.Keep(p)
	}
	if n, size := s.Usage(); n != 3 || size <= 0 {
		t.Fatalf("Usage: %d pods, %d bytes; want 3 pods", n, size)
	}

	a := pods[0]
	if err := s.Forget(a.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, string(a.UID))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a's spool dir after Forget: %v", err)
	}
	_, err := openLog(t, s, a, mainLog)
	if !errors.Is(err, ErrNoLog) {
		t.Fatalf("Open after Forget: %v, want ErrNoLog", err)
	}
	for _, name := range []string{"ns/a", "main", "last attempt"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Open's error %q does not name %q", err, name)
		}
	}
	// Forgotten: a new file is not linked any more, even by Open's rescan.
	c := newContainer(t, s, a)
	c.open("1.log")
	c.line("stdout", "F", "after Forget")
	c.close()
	if _, err := openLog(t, s, a, mainLog); !errors.Is(err, ErrNoLog) {
		t.Fatalf("Open after Forget and a new file: %v, want ErrNoLog", err)
	}

	// An agent restarted: it keeps b only.
	s2 := restarted(t, s)
	if err := s2.Prune(func(uid types.UID) bool { return uid == pods[1].UID }); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != string(pods[1].UID) {
		t.Fatalf("spool after Prune: %v, want only %s", entries, pods[1].UID)
	}
	checkLog(t, s2, pods[1], mainLog, "I am b\n")
	if n, _ := s2.Usage(); n != 1 {
		t.Fatalf("Usage after Prune: %d pods, want 1", n)
	}
	if err := s2.Forget("../x"); err == nil {
		t.Fatal("Forget of a UID that is not a directory name succeeded")
	}
}

// Names come from requests and from the node's filesystem: neither may
// lead out of the spool, and nothing but a regular file is linked or read.
func TestRefusesBadNamesAndSpecialFiles(t *testing.T) {
	s := newSpool(t, time.Hour)
	p := testPod("p")
	for _, name := range []string{"", "..", "../uid-p", "a/b", "Main", "main/../main", strings.Repeat("a", 64)} {
		_, err := openLog(t, s, p, stagecontract.LogRef{Container: name})
		if err == nil || errors.Is(err, ErrNoLog) {
			t.Errorf("Open container %q: %v, want a refusal", name, err)
		}
	}

	c := newContainer(t, s, p)
	c.open("0.log")
	c.line("stdout", "F", "the only file")
	c.close()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("2026-12-04T14:00:00Z stdout F secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(c.dir, "1.log")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(c.dir, "2.log"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(c.dir, "3.log"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A container directory that is a symlink is not followed either.
	elsewhere := filepath.Join(t.TempDir(), "side")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "0.log"), []byte("2026-12-04T14:00:00Z stdout F side\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(s.PodLogsDir, p.dirName(), "side")); err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Keep(p)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Keep hangs (on the fifo?)")
	}
	if got := links(t, s, p); len(got) != 1 || got[0] != "000000-000000.log" {
		t.Fatalf("links: %v, want 0.log's only", got)
	}
	if _, err := os.Lstat(filepath.Join(s.Dir, string(p.UID), "side")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the symlinked container dir was spooled: %v", err)
	}
	checkLog(t, s, p, mainLog, c.take())
	if _, err := openLog(t, s, p, stagecontract.LogRef{Container: "side"}); !errors.Is(err, ErrNoLog) {
		t.Fatalf("Open of the symlinked container: %v, want ErrNoLog", err)
	}
}
