package nodelogs

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
)

var (
	// logName is the kubelet's name of a container log file: the live
	// N.log, or N.log.YYYYMMDD-hhmmss once rotated. Compressed (.gz) and
	// temporary (.tmp) files do not match.
	logName = regexp.MustCompile(`^(\d+)\.log(?:\.(\d{8}-\d{6}))?$`)
	// linkName is the spool's name, ATTEMPT-SEQ.log: a listing sorts in
	// write order and tells the attempt.
	linkName = regexp.MustCompile(`^(\d+)-(\d+)\.log$`)
)

// maxScans bounds the rescans of a container directory that changed while
// it was looked at (a rotation at that moment); the next event or resync
// retries.
const maxScans = 5

// source is one of the kubelet's log files in a container directory.
type source struct {
	name    string
	attempt int
	rotated string // the timestamp suffix; "" for the live N.log
	id      fileID
	info    fs.FileInfo
}

// writeOrder orders files not yet linked as they were written: attempt by
// attempt, an attempt's rotated files by their timestamp, then the live
// file they were rotated from.
func writeOrder(a, b source) int {
	if c := cmp.Compare(a.attempt, b.attempt); c != 0 {
		return c
	}
	if (a.rotated == "") != (b.rotated == "") {
		if a.rotated == "" {
			return 1
		}
		return -1
	}
	return cmp.Or(cmp.Compare(a.rotated, b.rotated), cmp.Compare(a.name, b.name))
}

// scanPod links the new files of every container of k. The pod's log
// directory may not exist yet: the kubelet creates it when the first
// container starts, and the watch on PodLogsDir or a resync finds it.
func (s *Spool) scanPod(k *kept) error {
	dir := filepath.Join(s.PodLogsDir, k.pod.dirName())
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look at the pod log dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("pod log dir %s is not a directory", dir)
	}
	// Watch before listing: a container directory created in between is
	// then seen by one or the other.
	if err := s.watch(dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the pod log dir: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() && checkContainer(e.Name()) == nil {
			errs = append(errs, s.scanContainer(k, e.Name()))
		}
	}
	return errors.Join(errs...)
}

// scanContainer links the files of container ctr of k not linked yet.
func (s *Spool) scanContainer(k *kept, ctr string) error {
	src := filepath.Join(s.PodLogsDir, k.pod.dirName(), ctr)
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look at the log dir of container %s: %w", ctr, err)
	}
	if !fi.IsDir() {
		return nil // a symlink or a stray file: never followed
	}
	if err := s.watch(src); err != nil {
		return err
	}
	l, err := s.linkedOf(k, ctr)
	if err != nil {
		return err
	}
	dst := filepath.Join(s.Dir, string(k.pod.UID), ctr)
	for range maxScans {
		again, err := s.linkNew(k, ctr, l, src, dst)
		if err != nil || !again {
			return err
		}
	}
	return fmt.Errorf("link the logs of container %s: %s kept changing while linked", ctr, src)
}

// linkNew links the files of src that l has not seen, in write order. It
// says again when src changed under it: a rotation renamed a file between
// the listing and the link, so the order seen may be wrong.
func (s *Spool) linkNew(k *kept, ctr string, l *linked, src, dst string) (again bool, err error) {
	files, err := list(src)
	if err != nil {
		return false, err
	}
	files = slices.DeleteFunc(files, func(f source) bool { return l.seen[f.id] })
	if len(files) == 0 {
		return false, nil
	}
	// A rotation between the listing and the Lstats shows the new live file
	// without the rotated one it follows: link only what two listings agree on.
	second, err := list(src)
	if err != nil {
		return false, err
	}
	second = slices.DeleteFunc(second, func(f source) bool { return l.seen[f.id] })
	if !slices.EqualFunc(files, second, sameSource) {
		return true, nil
	}
	slices.SortStableFunc(files, writeOrder)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return false, fmt.Errorf("create the spool dir of container %s: %w", ctr, err)
	}
	for _, f := range files {
		from := filepath.Join(src, f.name)
		to := filepath.Join(dst, fmt.Sprintf("%06d-%06d.log", f.attempt, l.next))
		if err := os.Link(from, to); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return true, nil // removed or rotated since listed
			}
			if errors.Is(err, syscall.EXDEV) {
				return false, fmt.Errorf("link %s (the spool must be on the same mount as the pod logs dir): %w", from, err)
			}
			return false, fmt.Errorf("link %s: %w", from, err)
		}
		// The path may name another inode than the one listed (a rotation
		// in between): keep the link only if it is the file meant.
		got, err := os.Lstat(to)
		if err != nil {
			return false, fmt.Errorf("look at link %s: %w", to, err)
		}
		if !os.SameFile(got, f.info) {
			if err := os.Remove(to); err != nil {
				return false, fmt.Errorf("remove link %s of a file rotated while linked: %w", to, err)
			}
			return true, nil
		}
		l.seen[f.id] = true
		l.next++
		s.Log.V(1).Info("link a log file", "uid", k.pod.UID, "container", ctr, "file", f.name, "link", filepath.Base(to))
	}
	return false, nil
}

func sameSource(a, b source) bool { return a.name == b.name && a.id == b.id }

// list returns the kubelet's log files in dir: regular files only, never
// followed through a symlink, with their inodes.
func list(dir string) ([]source, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var files []source
	for _, e := range entries {
		m := logName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		attempt, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil || !fi.Mode().IsRegular() {
			continue // removed or replaced since listed
		}
		files = append(files, source{name: e.Name(), attempt: attempt, rotated: m[2], id: idOf(fi), info: fi})
	}
	return files, nil
}

// linkedOf returns what the spool holds of container ctr of k, reading
// the spool directory the first time: after an agent restart, the inodes
// already linked are those of the links.
func (s *Spool) linkedOf(k *kept, ctr string) (*linked, error) {
	if l := k.ctrs[ctr]; l != nil {
		return l, nil
	}
	links, err := listLinks(filepath.Join(s.Dir, string(k.pod.UID), ctr))
	if err != nil {
		return nil, err
	}
	l := &linked{seen: map[fileID]bool{}}
	for _, ln := range links {
		l.seen[idOf(ln.info)] = true
		l.next = max(l.next, ln.seq+1)
	}
	k.ctrs[ctr] = l
	return l, nil
}

// link is one file in a container's spool directory.
type link struct {
	path    string
	attempt int
	seq     int
	info    fs.FileInfo
}

// listLinks returns the links in dir in write order.
func listLinks(dir string) ([]link, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var links []link
	for _, e := range entries {
		m := linkName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		attempt, err1 := strconv.Atoi(m[1])
		seq, err2 := strconv.Atoi(m[2])
		fi, err3 := e.Info()
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		links = append(links, link{path: filepath.Join(dir, e.Name()), attempt: attempt, seq: seq, info: fi})
	}
	slices.SortFunc(links, func(a, b link) int { return cmp.Or(cmp.Compare(a.attempt, b.attempt), cmp.Compare(a.seq, b.seq)) })
	return links, nil
}

func idOf(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
}
