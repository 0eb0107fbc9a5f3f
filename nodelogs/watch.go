package nodelogs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultResync is the rescan period when Spool.Resync is not set.
const DefaultResync = 2 * time.Second

// Run links kept pods' new log files as fsnotify reports them, and
// rescans every kept pod each Resync for events it missed, until ctx
// ends. The kubelet removes a stopped container's files at once: a file
// must be linked when it is created, not at the next rescan.
func (s *Spool) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("start watching pod logs: %w", err)
	}
	defer func() { _ = w.Close() }()
	root := filepath.Clean(s.PodLogsDir)
	// The pod log directories of kept pods that have none yet appear here.
	if err := w.Add(root); err != nil {
		return fmt.Errorf("watch the pod logs dir: %w", err)
	}
	s.mu.Lock()
	if s.w != nil {
		s.mu.Unlock()
		return errors.New("nodelogs: Run already runs")
	}
	s.init()
	s.w = w
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.w = nil
		s.mu.Unlock()
	}()

	// Pods kept before Run have no watches yet.
	s.resync()
	every := s.Resync
	if every <= 0 {
		every = DefaultResync
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("nodelogs: the fsnotify watcher closed")
			}
			s.handle(root, ev)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("nodelogs: the fsnotify watcher closed")
			}
			s.Log.Error(err, "watch pod logs")
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				s.resync() // events were dropped: look at everything now
			}
		case <-tick.C:
			s.resync()
		}
	}
}

// handle rescans what an event under root names: a kept pod's log
// directory, one of its container directories, or a log file in one.
func (s *Spool) handle(root string, ev fsnotify.Event) {
	// Writes, the bulk of the events, add no file. A rename's old name
	// needs no look (its new name comes as a Create), but a look is cheap.
	if !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Rename) {
		return
	}
	rel, err := filepath.Rel(root, ev.Name)
	if err != nil || rel == "." {
		return
	}
	parts := strings.Split(rel, string(filepath.Separator))
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.byDir[parts[0]]
	if k == nil {
		return // not a kept pod's
	}
	switch {
	case len(parts) == 1:
		err = s.scanPod(k)
	case len(parts) == 2 && checkContainer(parts[1]) == nil,
		len(parts) == 3 && checkContainer(parts[1]) == nil && logName.MatchString(parts[2]):
		err = s.scanContainer(k, parts[1])
	}
	if err != nil {
		s.Log.Error(err, "link new log files", "pod", k.pod.Namespace+"/"+k.pod.Name, "uid", k.pod.UID)
	}
}

// resync rescans every kept pod.
func (s *Spool) resync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.pods {
		if err := s.scanPod(k); err != nil {
			s.Log.Error(err, "link a pod's logs", "pod", k.pod.Namespace+"/"+k.pod.Name, "uid", k.pod.UID)
		}
	}
}
