package stageout_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// Names the store cannot hold (a newline, invalid UTF-8, a backslash, a
// path in kdefer's reserved directory) are stored under encoded keys, with
// the original name in the manifest entry's path, next to the plain ones.
func TestHostileNames(t *testing.T) {
	u := "mem://names/run/"
	be, loc := storagetest.Open(t, u)
	src := t.TempDir()
	tree := stagetest.Tree{
		"ok.txt":                []byte("plain"),
		"new\nline.txt":         []byte("newline"),
		"bad\xff/x.dat":         []byte("invalid UTF-8"),
		"back\\slash":           []byte("backslash"),
		"_kdefer/manifest.json": []byte("a user file that looks like kdefer's"),
	}
	stagetest.MakeTree(t, src, tree)
	res, err := stageout.Run(context.Background(), outOpts(be, src, u))
	if err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	if res.Unsaved != 0 || res.Objects != int64(len(tree)) {
		t.Errorf("stored %d objects, %d unsaved; want %d and 0", res.Objects, res.Unsaved, len(tree))
	}
	m := readManifest(t, be, loc)
	type entry struct{ Key, Path, Data string }
	var got []entry
	for _, f := range m.Files {
		got = append(got, entry{f.Key, f.Path, string(storagetest.Read(t, be, loc.Prefix+f.Key, 0, -1))})
	}
	want := []entry{
		{"_kdefer/names/_kdefer/manifest.json", "_kdefer/manifest.json", "a user file that looks like kdefer's"},
		{"_kdefer/names/back%5Cslash", `back\slash`, "backslash"},
		{"_kdefer/names/bad%FF/x.dat", `"bad\xff/x.dat"`, "invalid UTF-8"},
		{"_kdefer/names/new%0Aline.txt", "new\nline.txt", "newline"},
		{"ok.txt", "", "plain"},
	}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b entry) bool { return a.Key < b.Key })); diff != "" {
		t.Errorf("manifest files (-want +got):\n%s", diff)
	}
	for _, f := range m.Files {
		if name := storage.NameOf(f); tree[name] == nil {
			t.Errorf("manifest key %q names %q, not a file of the tree", f.Key, name)
		}
	}
}
