package nodelogs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Pod identifies a pod whose logs are kept.
type Pod struct {
	Namespace, Name string
	UID             types.UID
}

// dirName is the pod's directory under the kubelet's podLogsDir
// (kubelet BuildPodLogsDirectory).
func (p Pod) dirName() string { return p.Namespace + "_" + p.Name + "_" + string(p.UID) }

// Spool hard-links the log files of kept pods into Dir. Its methods are
// safe to call concurrently; Run runs once at a time.
type Spool struct {
	// PodLogsDir is the kubelet's podLogsDir as this process sees it.
	PodLogsDir string
	// Dir is the spool root, on the same mount as PodLogsDir.
	Dir string
	Log logr.Logger
	// Resync is the period of the rescan of kept pods' directories
	// (default 2s), a safety net behind fsnotify.
	Resync time.Duration

	// mu serializes every look at the directories and every link: a scan
	// decides a link's name from what is already linked.
	mu    sync.Mutex
	pods  map[types.UID]*kept
	byDir map[string]*kept  // by pod log dir name, to route events
	w     *fsnotify.Watcher // while Run runs
}

// kept is a pod whose logs are linked.
type kept struct {
	pod Pod
	// ctrs holds what each container's spool directory holds, read from
	// the directory at the first scan (so it survives an agent restart).
	ctrs map[string]*linked
}

// linked is what one container's spool directory holds.
type linked struct {
	seen map[fileID]bool // the linked inodes: a rotated file keeps its inode
	next int             // SEQ of the next link
}

type fileID struct{ dev, ino uint64 }

func (s *Spool) init() {
	if s.pods == nil {
		s.pods = map[types.UID]*kept{}
		s.byDir = map[string]*kept{}
	}
}

// Keep starts keeping p's logs: it links what exists now and, while Run
// runs, what is created later. Errors are logged: a later rescan retries.
func (s *Spool) Keep(p Pod) {
	log := s.Log.WithValues("pod", p.Namespace+"/"+p.Name, "uid", p.UID)
	if err := checkUID(p.UID); err != nil {
		log.Error(err, "refuse to keep a pod's logs")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	k := s.pods[p.UID]
	if k == nil {
		k = &kept{pod: p, ctrs: map[string]*linked{}}
		s.pods[p.UID] = k
		s.byDir[p.dirName()] = k
		log.Info("keep a pod's logs")
	}
	if err := s.scanPod(k); err != nil {
		log.Error(err, "link a pod's logs")
	}
}

// Forget stops keeping the pod's logs and removes its spool directory.
// Call it once the run is released: the logs are gone for good.
func (s *Spool) Forget(uid types.UID) error {
	if err := checkUID(uid); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.pods[uid]; k != nil {
		s.unwatch(k)
		delete(s.pods, uid)
		delete(s.byDir, k.pod.dirName())
	}
	// Under mu: a concurrent Open lists and opens the links under mu too,
	// so it gets all of them or none.
	if err := os.RemoveAll(filepath.Join(s.Dir, string(uid))); err != nil {
		return fmt.Errorf("remove the spooled logs of pod %s: %w", uid, err)
	}
	s.Log.Info("forget a pod's logs", "uid", uid)
	return nil
}

// Prune removes the spool directories of the pods keep refuses, those
// whose runs were released while the agent was down, but never one of a
// pod it keeps (Keep may run after the caller's keep was made). keep is
// called without the spool's lock held.
func (s *Spool) Prune(keep func(types.UID) bool) error {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the spool %s: %w", s.Dir, err)
	}
	var errs []error
	for _, e := range entries {
		uid := types.UID(e.Name())
		if keep(uid) || s.keeps(uid) {
			continue
		}
		if err := s.Forget(uid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Spool) keeps(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[uid] != nil
}

// Usage counts the pods with a spool directory and the bytes of their
// spooled files: the agent's own cost. Files the kubelet still has are
// counted too, although they cost nothing more until it unlinks them.
func (s *Spool) Usage() (pods int, bytes int64) {
	entries, _ := os.ReadDir(s.Dir) // a missing spool holds nothing
	for _, e := range entries {
		if e.IsDir() {
			pods++
		}
	}
	_ = filepath.WalkDir(s.Dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil // removed while walking: not spooled any more
		}
		if fi, err := d.Info(); err == nil {
			bytes += fi.Size()
		}
		return nil
	})
	return pods, bytes
}

// unwatch stops watching k's directories. Errors are dropped: the kubelet
// may have removed a directory, which ends its watch.
func (s *Spool) unwatch(k *kept) {
	if s.w == nil {
		return
	}
	dir := filepath.Join(s.PodLogsDir, k.pod.dirName())
	for ctr := range k.ctrs {
		_ = s.w.Remove(filepath.Join(dir, ctr))
	}
	_ = s.w.Remove(dir)
}

// watch adds dir to the fsnotify watch while Run runs; adding a watched
// directory again is a no-op, so rescans call it freely.
func (s *Spool) watch(dir string) error {
	if s.w == nil {
		return nil
	}
	if err := s.w.Add(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	return nil
}

// checkUID refuses a UID that is not one path element: it names a
// directory under Dir that Forget removes.
func checkUID(uid types.UID) error {
	if uid == "" || uid == "." || uid == ".." || strings.ContainsAny(string(uid), `/\`) {
		return fmt.Errorf("pod UID %q is not a directory name", uid)
	}
	return nil
}

// checkContainer refuses a container name that is not a DNS label, as
// the apiserver does, before it becomes part of a path.
func checkContainer(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("container name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}
