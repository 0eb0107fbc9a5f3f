package storage

import (
	"strings"
	"testing"
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
