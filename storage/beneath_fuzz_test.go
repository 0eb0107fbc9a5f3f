//go:build unix

package storage

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Kinds of entry a hostile volume is built from, one per op byte.
const (
	bDir      = iota // a directory, entered
	bUp              // leave the current directory
	bFile            // a regular file
	bFIFO            // a FIFO
	bLinkOut         // an absolute link to a directory outside the volume
	bLinkRoot        // a link to /
	bLinkUp          // a relative link climbing out of the volume
	bLinkIn          // a relative link to the last directory made
	bLinkDot         // a link to "." (a loop)
	nBOps
)

// beneathName reads a name of 1 to 8 bytes: anything but '/' and NUL.
func beneathName(ops []byte, i *int) string {
	n := 1
	if *i < len(ops) {
		n = int(ops[*i])%8 + 1
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

// buildVolume makes the tree ops describes under vol and returns the paths
// made, relative to vol.
func buildVolume(t *testing.T, vol, outside string, ops []byte) []string {
	var made, dirs []string
	lastDir := ""
	for i := 0; i < len(ops) && len(made) < 32; {
		op := ops[i] % nBOps
		i++
		if op == bUp {
			if len(dirs) > 0 {
				dirs = dirs[:len(dirs)-1]
			}
			continue
		}
		rel := beneathName(ops, &i)
		if len(dirs) > 0 {
			rel = dirs[len(dirs)-1] + "/" + rel
		}
		p := filepath.Join(vol, rel)
		if _, err := os.Lstat(p); err == nil || len(rel) > 1024 {
			continue
		}
		var err error
		switch op {
		case bDir:
			if err = os.Mkdir(p, 0o755); err == nil {
				dirs, lastDir = append(dirs, rel), rel
			}
		case bFile:
			err = os.WriteFile(p, nil, 0o644)
		case bFIFO:
			err = syscall.Mkfifo(p, 0o644)
		case bLinkOut:
			err = os.Symlink(outside, p)
		case bLinkRoot:
			err = os.Symlink("/", p)
		case bLinkUp:
			err = os.Symlink(strings.Repeat("../", strings.Count(rel, "/")+4)+strings.TrimPrefix(outside, "/"), p)
		case bLinkIn:
			if lastDir == "" {
				continue
			}
			err = os.Symlink(strings.Repeat("../", strings.Count(rel, "/"))+lastDir, p)
		case bLinkDot:
			err = os.Symlink(".", p)
		}
		if err != nil {
			t.Fatalf("make %q: %v", rel, err)
		}
		made = append(made, rel)
	}
	return made
}

// FuzzResolveBeneath builds hostile volumes (directories, links out, to /,
// climbing out, inside and in loops, FIFOs, files; names of any bytes) and
// opens a path in them, with openat2 and with the component walk alone,
// creating what is missing or not. It checks what the stage steps rely on,
// against an oracle that Lstats each component: the open never blocks; it
// opens a directory exactly when every component is one (or is missing and
// made), and then the very directory the path names inside the volume,
// never the outside or /; otherwise it names the first component that is
// not a directory and what it is, or says it is missing; a path out of the
// volume is a usage error; nothing is ever made outside.
func FuzzResolveBeneath(f *testing.F) {
	f.Add([]byte{bDir, 1, 'a', bDir, 1, 'b'}, uint16(1), uint8(0))
	f.Add([]byte{bLinkOut, 1, 'o', bLinkRoot, 1, 'r', bFIFO, 1, 'p'}, uint16(0x100), uint8(1))
	f.Add([]byte{bDir, 1, 'd', bLinkUp, 1, 'u', bLinkIn, 1, 'i', bLinkDot, 1, 'l'}, uint16(2), uint8(3))
	f.Add([]byte{bDir, 1, 'd', bFile, 1, 'f', bUp, bFIFO, 1, 'p'}, uint16(0x201), uint8(2))
	f.Fuzz(func(t *testing.T, ops []byte, target uint16, flags uint8) {
		if len(ops) > 1024 {
			return
		}
		if flags&2 != 0 {
			defer func(old func(int, string) (int, error)) { openat2 = old }(openat2)
			openat2 = func(int, string) (int, error) { return -1, unix.ENOSYS }
		}
		vol, outside := t.TempDir(), t.TempDir()
		made := buildVolume(t, vol, outside, ops)
		// The path: an entry made (or the root), then maybe a missing name
		// or steps up, which only a lexical reading may take.
		rel := "."
		if n := int(target&0xff) % (len(made) + 1); n < len(made) {
			rel = made[n]
		}
		rel += []string{"", "/new", "/..", "/../.."}[target>>8%4]
		create := flags&1 != 0

		r, err := openBounded(t, vol, vol+"/"+rel, create)
		if r != nil {
			defer r.Close()
		}
		clean := filepath.Clean(rel)
		if clean == ".." || strings.HasPrefix(clean, "../") {
			if err == nil || ClassOf(err) != Usage {
				t.Fatalf("%q leaves the volume: opened (%v), want a usage error", rel, err)
			}
			return
		}
		want, missing := oracle(t, vol, clean)
		switch {
		case want != nil:
			var nd *NotDirError
			if !errors.As(err, &nd) || *nd != *want {
				t.Fatalf("%q: got %v, want %v", rel, err, want)
			}
		case missing && !create:
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%q: got %v, want not-exist", rel, err)
			}
		default:
			if err != nil {
				t.Fatalf("%q: %v", rel, err)
			}
			assertSame(t, r, filepath.Join(vol, clean))
			for _, other := range []string{outside, "/"} {
				if fi, err := os.Stat(other); err == nil {
					if got, _ := r.Stat("."); os.SameFile(fi, got) {
						t.Fatalf("%q opened %s", rel, other)
					}
				}
			}
		}
		if ents, err := os.ReadDir(outside); err != nil || len(ents) != 0 {
			t.Fatalf("made %d entries outside the volume (%v)", len(ents), err)
		}
	})
}

// oracle Lstats each component of rel under vol: the first that is no
// directory, as the error it should give, or whether one is missing.
func oracle(t *testing.T, vol, rel string) (*NotDirError, bool) {
	if rel == "." {
		return nil, false
	}
	p := vol
	for _, name := range strings.Split(rel, "/") {
		p = filepath.Join(p, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, true
		}
		if err != nil {
			t.Fatal(err)
		}
		switch m := fi.Mode(); {
		case m.IsDir():
			continue
		case m&fs.ModeSymlink != 0:
			return &NotDirError{Path: p, What: "a symbolic link"}, false
		case m&fs.ModeNamedPipe != 0:
			return &NotDirError{Path: p, What: "a FIFO"}, false
		default:
			return &NotDirError{Path: p, What: "a regular file"}, false
		}
	}
	return nil, false
}
