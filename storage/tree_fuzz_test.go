package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/stagecontract"
)

// testTempSuffix stands for the partial-file suffix of an engine (stage-in's
// is ".kdefer-tmp").
const testTempSuffix = ".kdefer-tmp"

// FuzzCheckTree: CheckTree accepts a set of names exactly when every name
// can be a file (no name is a directory of another, none is a temporary
// name), checked against the definition by brute force, and its refusals
// are permanent.
func FuzzCheckTree(f *testing.F) {
	for _, s := range []string{"a\nb/c\nb/d/e", "a\na/b", "x/y/z\nx/y", "f" + testTempSuffix, "a\na", "a/b\na/b/c/d\nq"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		rels := strings.Split(list, "\n")
		if len(rels) > 64 {
			return
		}
		for _, r := range rels {
			if CheckRel(r) != nil {
				return // refused before CheckTree (RelFor, ParseManifest)
			}
		}
		err := CheckTree(rels, testTempSuffix)
		ok := true
		for _, a := range rels {
			if strings.HasSuffix(a, testTempSuffix) {
				ok = false
			}
			for _, b := range rels {
				if strings.HasPrefix(b, a+"/") {
					ok = false
				}
			}
		}
		if (err == nil) != ok {
			t.Fatalf("CheckTree(%q) = %v, want ok=%v", rels, err, ok)
		}
		if err != nil && ClassOf(err) != Permanent {
			t.Fatalf("CheckTree(%q) = %v, not permanent", rels, err)
		}
	})
}

// FuzzCheckLinks: a manifest's symbolic links that ParseManifest's check
// (checkLinks) accepts never resolve out of the tree once made, as the
// kernel resolves them (os.Root, which refuses any step out): the virtual
// resolution against the manifest's other links is never more lenient than
// the real one. Each line of list is "name target".
func FuzzCheckLinks(f *testing.F) {
	for _, s := range []string{"a ..\nb a/x", "d/a ../f\nd/b a/..", "a sub/b/..\nsub/b ..", "x y\ny x", "a /etc", "a d/../..\nd ."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		lines := strings.Split(list, "\n")
		if len(lines) > 16 {
			return
		}
		var links []stagecontract.ManifestLink
		names := []string{"f"}
		for _, l := range lines {
			name, target, ok := strings.Cut(l, " ")
			if !ok || CheckRel(name) != nil {
				return
			}
			links = append(links, stagecontract.ManifestLink{Path: name, Kind: stagecontract.LinkSymbolic, Target: target})
			names = append(names, name)
		}
		if CheckTree(names, testTempSuffix) != nil {
			return // refused before a link is made
		}
		if checkLinks(links, map[string]struct{}{"f": {}}) != nil {
			return
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			p := filepath.Join(dir, l.Path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return // a parent is a link made before: not a tree stage-in makes
			}
			if err := os.Symlink(l.Target, p); err != nil {
				t.Fatal(err)
			}
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		for _, l := range links {
			if _, err := root.Stat(l.Path); err != nil && strings.Contains(err.Error(), "escapes") {
				t.Fatalf("links %q accepted, but %q leads out: %v", lines, l.Path, err)
			}
		}
	})
}
