package nodelogs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"

	"github.com/kdefer/kdefer/stagecontract"
)

// ErrNoLog is the error, wrapped, of Open for a container attempt with no
// spooled file.
var ErrNoLog = errors.New("no spooled log")

// Open returns what container ref.Container of pod wrote in its last
// attempt, or in the one before it with ref.Previous: every generation of
// that attempt's log, in write order, decoded from the CRI log format. The
// files stay readable after the kubelet removes its paths, and after a
// Forget that comes while the reader is open.
func (s *Spool) Open(ctx context.Context, pod *corev1.Pod, ref stagecontract.LogRef) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkContainer(ref.Container); err != nil {
		return nil, fmt.Errorf("open a spooled log of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if err := checkUID(pod.UID); err != nil {
		return nil, fmt.Errorf("open a spooled log of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	which := "last attempt"
	if ref.Previous {
		which = "previous attempt"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Files created since the last event or rescan (a restart just now)
	// are linked before the choice of attempt.
	if k := s.pods[pod.UID]; k != nil {
		if err := s.scanContainer(k, ref.Container); err != nil {
			s.Log.Error(err, "link new log files before serving", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "container", ref.Container)
		}
	}
	links, err := listLinks(s.containerDir(pod, ref.Container))
	if err != nil {
		return nil, fmt.Errorf("open the log of pod %s/%s container %q, %s: %w", pod.Namespace, pod.Name, ref.Container, which, err)
	}
	attempt, ok := pickAttempt(links, ref.Previous)
	if !ok {
		return nil, fmt.Errorf("open the log of pod %s/%s container %q, %s: %w", pod.Namespace, pod.Name, ref.Container, which, ErrNoLog)
	}
	r := &spooled{}
	var readers []io.Reader
	for _, ln := range links {
		if ln.attempt != attempt {
			continue
		}
		// O_NOFOLLOW: the spool holds links this package made; a symlink
		// there was put by someone else.
		f, err := os.OpenFile(ln.path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			_ = r.Close()
			return nil, fmt.Errorf("open the log of pod %s/%s container %q, attempt %d: %w", pod.Namespace, pod.Name, ref.Container, attempt, err)
		}
		r.files = append(r.files, f)
		// One decoder per file: a line cut short at a file's end (the
		// reader got there mid-write) must not swallow the next file's first.
		readers = append(readers, NewCRIReader(f))
	}
	r.Reader = io.MultiReader(readers...)
	s.Log.V(1).Info("serve a spooled log", "pod", pod.Namespace+"/"+pod.Name, "container", ref.Container, "attempt", attempt, "files", len(r.files))
	return r, nil
}

func (s *Spool) containerDir(pod *corev1.Pod, ctr string) string {
	return filepath.Join(s.Dir, string(pod.UID), ctr)
}

// pickAttempt returns the highest attempt in links, or with previous the
// second highest: the kubelet numbers a container's files by its restart
// count, so the one before the last is the highest below it, whatever the
// gap.
func pickAttempt(links []link, previous bool) (int, bool) {
	var attempts []int // distinct, ascending: links are sorted
	for _, ln := range links {
		if n := len(attempts); n == 0 || attempts[n-1] != ln.attempt {
			attempts = append(attempts, ln.attempt)
		}
	}
	i := len(attempts) - 1
	if previous {
		i--
	}
	if i < 0 {
		return 0, false
	}
	return attempts[i], true
}

// spooled reads the files of one attempt through fds opened at Open.
type spooled struct {
	io.Reader
	files []*os.File
}

func (r *spooled) Close() error {
	var errs []error
	for _, f := range r.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
