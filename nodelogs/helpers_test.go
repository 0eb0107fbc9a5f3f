package nodelogs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kdefer/kdefer/stagecontract"
)

// newSpool returns a spool whose pod logs dir and spool dir share a
// temporary directory, hence a mount.
func newSpool(t *testing.T, resync time.Duration) *Spool {
	t.Helper()
	root := t.TempDir()
	s := &Spool{
		PodLogsDir: filepath.Join(root, "pods"),
		Dir:        filepath.Join(root, "spool"),
		Log:        testr.NewWithOptions(t, testr.Options{Verbosity: 1}),
		Resync:     resync,
	}
	if err := os.MkdirAll(s.PodLogsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// restarted is another agent process on the same directories.
func restarted(t *testing.T, s *Spool) *Spool {
	return &Spool{PodLogsDir: s.PodLogsDir, Dir: s.Dir, Log: testr.New(t), Resync: s.Resync}
}

func testPod(name string) Pod {
	return Pod{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}
}

func (p Pod) object() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID}}
}

// logDir is the kubelet's directory of container ctr of p.
func logDir(s *Spool, p Pod, ctr string) string {
	return filepath.Join(s.PodLogsDir, p.dirName(), ctr)
}

// container plays the runtime writing one container's log: want is what
// kubectl logs would show of everything written through it.
type container struct {
	t    *testing.T
	dir  string
	f    *os.File
	mu   sync.Mutex
	want bytes.Buffer
	n    int // lines written, for timestamps
}

// testContainer is the container the tests' pods write as.
const testContainer = "main"

func newContainer(t *testing.T, s *Spool, p Pod) *container {
	t.Helper()
	c := &container{t: t, dir: logDir(s, p, testContainer)}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// open makes name the file written from now on (a start, a restart or the
// runtime's reopen after a rotation).
func (c *container) open(name string) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil {
		_ = c.f.Close()
	}
	f, err := os.OpenFile(filepath.Join(c.dir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		c.t.Fatal(err)
	}
	c.f = f
}

// line writes one CRI line, tag F or P, in one write as the runtime does.
func (c *container) line(stream, tag, content string) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	ts := time.Date(2026, 12, 4, 14, 0, 0, c.n, time.UTC).Format(time.RFC3339Nano)
	if _, err := fmt.Fprintf(c.f, "%s %s %s %s\n", ts, stream, tag, content); err != nil {
		c.t.Errorf("write a log line: %v", err)
		return
	}
	c.want.WriteString(content)
	if tag != "P" {
		c.want.WriteByte('\n')
	}
}

// take returns what was written since the last take: one attempt's log.
func (c *container) take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.want.String()
	c.want.Reset()
	return s
}

func (c *container) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil {
		_ = c.f.Close()
		c.f = nil
	}
}

func openLog(t *testing.T, s *Spool, p Pod, ref stagecontract.LogRef) (string, error) {
	t.Helper()
	rc, err := s.Open(context.Background(), p.object(), ref)
	if err != nil {
		return "", err
	}
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read log %+v: %v", ref, err)
	}
	return string(b), nil
}

// checkLog fails t unless Open(ref) gives want.
func checkLog(t *testing.T, s *Spool, p Pod, ref stagecontract.LogRef, want string) {
	t.Helper()
	got, err := openLog(t, s, p, ref)
	if err != nil {
		t.Fatalf("Open %+v: %v", ref, err)
	}
	if got != want {
		t.Fatalf("Open %+v: %s", ref, diffAt(got, want))
	}
}

// links lists the spool directory of p's testContainer.
func links(t *testing.T, s *Spool, p Pod) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.Dir, string(p.UID), testContainer))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitLinks waits until the spool holds n links of p's testContainer.
func waitLinks(t *testing.T, s *Spool, p Pod, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d links", n), func() bool { return len(links(t, s, p)) >= n })
	if got := links(t, s, p); len(got) != n {
		t.Fatalf("links: %s, want %d", strings.Join(got, " "), n)
	}
}
