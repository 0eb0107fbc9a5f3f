package stagein

import (
	"strings"
	"testing"

	"github.com/kdefer/kdefer/storage"
)

// FuzzCheckTree: checkTree accepts a set of names exactly when every name
// can be a file (no name is a directory of another, none is a temporary
// name), checked against the definition by brute force, and its refusals
// are permanent.
func FuzzCheckTree(f *testing.F) {
	for _, s := range []string{"a\nb/c\nb/d/e", "a\na/b", "x/y/z\nx/y", "f" + TempSuffix, "a\na", "a/b\na/b/c/d\nq"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		rels := strings.Split(list, "\n")
		if len(rels) > 64 {
			return
		}
		es := make([]entry, len(rels))
		for i, r := range rels {
			if storage.CheckRel(r) != nil {
				return // refused before checkTree (RelFor, ParseManifest)
			}
			es[i] = entry{rel: r}
		}
		err := checkTree(es)
		ok := true
		for _, a := range rels {
			if strings.HasSuffix(a, TempSuffix) {
				ok = false
			}
			for _, b := range rels {
				if strings.HasPrefix(b, a+"/") {
					ok = false
				}
			}
		}
		if (err == nil) != ok {
			t.Fatalf("checkTree(%q) = %v, want ok=%v", rels, err, ok)
		}
		if err != nil && storage.ClassOf(err) != storage.Permanent {
			t.Fatalf("checkTree(%q) = %v, not permanent", rels, err)
		}
	})
}
