//go:build unix

package walk_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout/walk"
	"github.com/kdefer/kdefer/storage"
)

// Kinds of entry a hostile tree is built from, one per op byte.
const (
	opFile        = iota // a regular file
	opDir                // a directory, entered
	opUp                 // leave the current directory
	opLinkInside         // a relative link to the last file made
	opLinkOut            // an absolute link to a directory outside
	opFIFO               // a FIFO
	opMode000            // a file, or the current directory, mode 000
	opLinkLoop           // a link to ".." (a directory loop)
	opHardLink           // a hard link to the last file made
	opLinkUp             // a relative link up past the root, to outside
	opLinkNowhere        // a relative link to nothing
	nOps
)

// tree builds the hostile tree ops describes under root and returns what it
// made: for every regular file, its path; for every FIFO, its path.
type tree struct {
	root      string
	files     map[string]bool
	fifos     map[string]bool
	symlinks  map[string]bool // true: leads out (absolute, or up past the root)
	locked    []string        // directories made mode 000, to unlock for cleanup
	lastFile  string
	outside   string
	dirs      []string // the current directory, as a stack
	pathBytes int
}

// name reads a name of 1 to 16 bytes: anything but '/' and NUL, which no
// file name holds, so newlines, control characters and invalid UTF-8 all
// occur.
func name(ops []byte, i *int) string {
	n := 1
	if *i < len(ops) {
		n = int(ops[*i])%16 + 1
		*i++
	}
	b := make([]byte, 0, n)
	for ; n > 0 && *i < len(ops); n-- {
		c := ops[*i]
		*i++
		if c == '/' || c == 0 {
			c = '\n'
		}
		b = append(b, c)
	}
	if s := string(b); s == "" || s == "." || s == ".." {
		return s + "x"
	}
	return string(b)
}

func (tr *tree) cur() string {
	if len(tr.dirs) == 0 {
		return ""
	}
	return tr.dirs[len(tr.dirs)-1]
}

func (tr *tree) rel(n string) string {
	if c := tr.cur(); c != "" {
		return c + "/" + n
	}
	return n
}

func build(t *testing.T, ops []byte) *tree {
	tr := &tree{root: t.TempDir(), outside: t.TempDir(), files: map[string]bool{}, fifos: map[string]bool{}, symlinks: map[string]bool{}}
	if err := os.WriteFile(filepath.Join(tr.outside, "secret"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range tr.locked {
			_ = os.Chmod(d, 0o755) // so that the temporary directory can be removed
		}
	})
	for i := 0; i < len(ops) && len(tr.files)+len(tr.fifos) < 64; {
		op := ops[i] % nOps
		i++
		if op == opUp {
			if len(tr.dirs) > 0 {
				tr.dirs = tr.dirs[:len(tr.dirs)-1]
			}
			continue
		}
		rel := tr.rel(name(ops, &i))
		if len(rel) > 2048 {
			continue // deep enough; PATH_MAX bounds what the test itself can make
		}
		p := filepath.Join(tr.root, rel)
		if _, err := os.Lstat(p); err == nil {
			continue // never write through what is there (a FIFO would block)
		}
		var err error
		switch op {
		case opFile:
			if err = os.WriteFile(p, []byte(rel), 0o644); err == nil {
				tr.files[rel], tr.lastFile = true, rel
			}
		case opDir:
			if err = os.Mkdir(p, 0o755); err == nil {
				tr.dirs = append(tr.dirs, rel)
			}
		case opLinkInside:
			if tr.lastFile == "" {
				continue
			}
			target := strings.Repeat("../", strings.Count(rel, "/")) + tr.lastFile
			if err = os.Symlink(target, p); err == nil {
				tr.symlinks[rel] = false
			}
		case opLinkOut:
			if err = os.Symlink(tr.outside, p); err == nil {
				tr.symlinks[rel] = true
			}
		case opLinkUp:
			target := strings.Repeat("../", strings.Count(rel, "/")+1) + filepath.Base(tr.outside) + "/secret"
			if err = os.Symlink(target, p); err == nil {
				tr.symlinks[rel] = true
			}
		case opLinkNowhere:
			if err = os.Symlink("nowhere", p); err == nil {
				tr.symlinks[rel] = false
			}
		case opHardLink:
			if tr.lastFile == "" {
				continue
			}
			if err = os.Link(filepath.Join(tr.root, tr.lastFile), p); err == nil {
				tr.files[rel] = true
			} else if errors.Is(err, os.ErrPermission) {
				continue // the last file is in a directory made mode 000
			}
		case opFIFO:
			if err = syscall.Mkfifo(p, 0o644); err == nil {
				tr.fifos[rel] = true
			}
		case opMode000:
			if c := tr.cur(); c != "" && ops[i-1]/nOps%2 == 0 {
				if err = os.Chmod(filepath.Join(tr.root, c), 0); err == nil {
					tr.locked = append(tr.locked, filepath.Join(tr.root, c))
					tr.dirs = tr.dirs[:len(tr.dirs)-1] // nothing more can be made in it
				}
				continue
			}
			if err = os.WriteFile(p, nil, 0); err == nil {
				tr.files[rel], tr.lastFile = true, rel
			}
		case opLinkLoop:
			if err = os.Symlink("..", p); err == nil {
				tr.symlinks[rel] = false
			}
		}
		if err != nil && !os.IsExist(err) {
			t.Fatalf("make %q: %v", rel, err)
		}
	}
	return tr
}

// FuzzWalk walks generated hostile trees (names with newlines, invalid
// UTF-8 and control characters, symbolic links inside, out, up past the
// root, to nothing and in loops, hard links, FIFOs, mode-000 files and
// directories, deep nesting) and checks what stage-out relies on: the walk
// ends; it chooses only regular files inside the root, not through a link,
// each file (inode) once, under the key KeyFor gives; a hard link it
// records names a file it chose, the same inode; a symbolic link it
// records resolves inside the root, and one leading out is never recorded;
// and nothing is lost silently: every regular file and symbolic link is
// chosen, linked, or it or a directory above it is listed as skipped with a
// reason. FIFOs are never chosen.
//
// Directories are opened with a short timeout: nothing in a generated tree
// blocks an open (FIFOs are opened non-blocking), and should one block all
// the same, it costs the input 200 ms, not the production 30 s (which is
// past the fuzzing worker's 10 s limit per input).
func FuzzWalk(f *testing.F) {
	seeds := [][]byte{
		{opFile, 3, 'a', '\n', 'b', opFile, 2, 0xff, 0xfe},
		{opDir, 1, 'd', opFile, 1, 'f', opLinkInside, 1, 'l', opUp, opLinkOut, 1, 'o'},
		{opFIFO, 1, 'p', opMode000, 1, 'z', opLinkLoop, 1, 'y'},
		{opDir, 1, 'd', opFile, 1, 'f', opMode000 + nOps, 0, 'g', opMode000, 0, 'h', opFile, 1, 'g'},
		bytes.Repeat(append([]byte{opDir, 14}, bytes.Repeat([]byte{'n'}, 15)...), 40), // deep nesting
		{opDir, 1, 'd', opFile, 1, 'f', opHardLink, 1, 'h', opUp, opHardLink, 1, 'i', opLinkUp, 1, 'u', opDir, 1, 'e', opLinkUp, 1, 'v', opLinkNowhere, 1, 'n'},
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 4096 {
			return
		}
		tr := build(t, ops)
		root, err := os.OpenRoot(tr.root)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		filter, err := storage.NewFilter(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		const prefix = "out/"
		chosen := map[string]bool{}
		inodes := map[[2]uint64]string{}
		linked := map[string]bool{}
		skipped := map[string]string{}
		o := walk.Options{Prefix: prefix, Filter: filter, OpenTimeout: 200 * time.Millisecond, Log: zerolog.Nop()}
		err = walk.Walk(context.Background(), root, o, walk.Visitor{File: func(f walk.File) {
			if chosen[f.Rel] || linked[f.Rel] {
				t.Errorf("chose %q twice", f.Rel)
			}
			chosen[f.Rel] = true
			fi, err := root.Lstat(f.Rel)
			if err != nil || !fi.Mode().IsRegular() {
				t.Errorf("chose %q: not a regular file inside the root (%v)", f.Rel, err)
				return
			}
			id := inodeOf(fi)
			if other, ok := inodes[id]; ok {
				t.Errorf("chose %q and %q, one file", other, f.Rel)
			}
			inodes[id] = f.Rel
			key, encoded, err := storage.KeyFor(prefix, f.Rel)
			if err != nil || key != f.Key || encoded != f.Encoded {
				t.Errorf("chose %q with key %q (encoded %v), KeyFor says %q, %v, %v", f.Rel, f.Key, f.Encoded, key, encoded, err)
			}
		}, Link: func(l walk.Link) {
			if chosen[l.Rel] || linked[l.Rel] {
				t.Errorf("linked %q, chosen already", l.Rel)
			}
			linked[l.Rel] = true
			fi, err := root.Lstat(l.Rel)
			if err != nil {
				t.Errorf("linked %q: %v", l.Rel, err)
				return
			}
			switch l.Kind {
			case stagecontract.LinkHard:
				if !chosen[l.Target] || inodes[inodeOf(fi)] != l.Target {
					t.Errorf("hard link %q to %q: not a file chosen, or another file", l.Rel, l.Target)
				}
			case stagecontract.LinkSymbolic:
				if out := tr.symlinks[l.Rel]; out {
					t.Errorf("recorded %q, a symbolic link leading out", l.Rel)
				}
				if got, err := root.Readlink(l.Rel); err != nil || got != l.Target {
					t.Errorf("symbolic link %q: text %q, recorded %q (%v)", l.Rel, got, l.Target, err)
				}
				if _, err := root.Stat(l.Rel); err != nil {
					t.Errorf("recorded symbolic link %q: it does not resolve inside the root: %v", l.Rel, err)
				}
			default:
				t.Errorf("linked %q: kind %q", l.Rel, l.Kind)
			}
		}, Skip: func(rel, reason string) {
			if reason == "" {
				t.Errorf("skipped %q without a reason", rel)
			}
			if reason == walk.ReasonVanished {
				t.Errorf("skipped %q as vanished: nothing in the tree is removed", rel)
			}
			skipped[rel] = reason
		}})
		if errors.Is(err, storage.ErrOpenHung) {
			// Only a machine too loaded to open a local directory in
			// 200 ms gets here; what the walk chose is then not the point.
			t.Skipf("Walk: %v", err)
		}
		if err != nil {
			t.Fatalf("Walk: %v", err)
		}
		for p := range tr.fifos {
			if chosen[p] {
				t.Errorf("chose the FIFO %q", p)
			}
		}
		for p := range tr.files {
			if chosen[p] || linked[p] || skippedAbove(skipped, p) {
				continue
			}
			t.Errorf("lost %q: neither chosen, linked nor skipped (skipped: %q)", p, skipped)
		}
		for p, out := range tr.symlinks {
			if linked[p] || skippedAbove(skipped, p) {
				continue
			}
			t.Errorf("lost the symbolic link %q (out: %v): neither linked nor skipped (skipped: %q)", p, out, skipped)
		}
	})
}

func inodeOf(fi os.FileInfo) [2]uint64 {
	st := fi.Sys().(*syscall.Stat_t)
	return [2]uint64{uint64(st.Dev), st.Ino} //nolint:unconvert // Dev is uint32 on some platforms
}

// skippedAbove reports whether p or a directory above it was skipped.
func skippedAbove(skipped map[string]string, p string) bool {
	for {
		if _, ok := skipped[p]; ok {
			return true
		}
		i := strings.LastIndex(p, "/")
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}
