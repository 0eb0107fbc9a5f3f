// Package stagetest holds what the stage engines' tests share: local file
// trees (write, read back, compare) and a retry policy that does not wait.
// stagein's and stageout's tests both use it, against the stores
// storage/storagetest starts.
//
// It must not import stagein or stageout (it is their tests' helper, not a
// test of them) and holds no test cases: those live next to each engine.
package stagetest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// FastRetry retries quickly: engine tests exercise logic, not waiting.
func FastRetry() storage.RetryPolicy {
	return storage.RetryPolicy{Attempts: 5, Base: 5 * time.Millisecond, Max: 50 * time.Millisecond}
}

// Tree is a set of files: relative path -> content.
type Tree map[string][]byte

// MakeTree writes files under dir.
func MakeTree(t testing.TB, dir string, tree Tree) {
	t.Helper()
	for rel, data := range tree {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ReadTree reads every regular file under dir.
func ReadTree(t testing.TB, dir string) Tree {
	t.Helper()
	tree := Tree{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		tree[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// SampleTree has nested directories, an empty file, many small files and
// one file large enough for multipart uploads and ranged downloads.
func SampleTree(small int) Tree {
	tree := Tree{"empty": nil, "top.txt": []byte("top\n"), "big/huge.bin": storagetest.RandBytes(7, 70<<20+12345)}
	for i := range small {
		tree[fmt.Sprintf("d%d/e%d/f%03d.dat", i%3, i%5, i)] = storagetest.RandBytes(uint64(1000+i), 1000+i*37)
	}
	return tree
}

// DiffTrees lists, one per line, the files missing from got, differing or
// extra; empty when the trees are equal.
func DiffTrees(want, got Tree) string {
	var out []string
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			out = append(out, "missing "+k)
		case !bytes.Equal(v, g):
			out = append(out, fmt.Sprintf("differs %s (%d vs %d bytes)", k, len(v), len(g)))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "extra "+k)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// Keys returns the tree's paths, sorted.
func (t Tree) Keys() []string {
	var ks []string
	for k := range t {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
