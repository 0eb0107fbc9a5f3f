//go:build linux

package stageout_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/walk"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// countingBackend counts the objects stored, the manifest aside.
type countingBackend struct {
	storage.Backend
	puts atomic.Int64
}

func (c *countingBackend) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts storage.PutOptions) (uint32, error) {
	if !strings.Contains(key, stagecontract.ReservedDir) { // the outputs' objects, not kdefer's
		c.puts.Add(1)
	}
	return c.Backend.Put(ctx, key, src, size, opts)
}

// A file with 10,000 hard links is stored once: its other names are in the
// manifest as hard links to it, and stage-in restores them as hard links
// (one inode, not 10,000 copies).
func TestHardLinksStoredOnce(t *testing.T) {
	const links = 10000
	u := "mem://links/hard/"
	mem, loc := storagetest.Open(t, u)
	be := &countingBackend{Backend: mem}
	src := t.TempDir()
	data := storagetest.RandBytes(7, 64<<10)
	mustDo(t, os.WriteFile(filepath.Join(src, "data.bin"), data, 0o644))
	mustDo(t, os.WriteFile(filepath.Join(src, "other.txt"), []byte("other"), 0o644))
	mustDo(t, os.Mkdir(filepath.Join(src, "l"), 0o755))
	for i := range links {
		mustDo(t, os.Link(filepath.Join(src, "data.bin"), filepath.Join(src, "l", fmt.Sprintf("%05d", i))))
	}
	res, err := stageout.Run(context.Background(), outOpts(be, src, u))
	if err != nil {
		t.Fatal(err)
	}
	if n := be.puts.Load(); n != 2 {
		t.Errorf("stored %d objects, want 2 (the file with %d links once, and other.txt)", n, links)
	}
	if res.Unsaved != 0 {
		t.Errorf("unsaved %d, want 0", res.Unsaved)
	}
	m := readManifest(t, mem, loc)
	if len(m.Files) != 2 || len(m.Links) != links {
		t.Fatalf("manifest lists %d files and %d links, want 2 and %d", len(m.Files), len(m.Links), links)
	}
	// The walk meets the names in directory order: whichever came first is
	// stored, the others name it.
	stored := map[string]bool{}
	for _, f := range m.Files {
		stored[f.Key] = true
	}
	for _, l := range m.Links {
		if l.Kind != stagecontract.LinkHard || !stored[l.Target] || l.Target == "other.txt" {
			t.Fatalf("link %+v: want a hard link to the stored data.bin", l)
		}
	}

	dst := t.TempDir()
	if _, err := stagein.Run(context.Background(), inOpts(mem, loc.KeyURL(loc.Prefix+stagecontract.ManifestKey), dst)); err != nil {
		t.Fatal(err)
	}
	first, err := os.Stat(filepath.Join(dst, "data.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range links {
		p := filepath.Join(dst, "l", fmt.Sprintf("%05d", i))
		fi, err := os.Stat(p)
		if err != nil || !os.SameFile(first, fi) {
			t.Fatalf("%s: %v, not restored as a hard link of data.bin", p, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "l", "00042")); !slices.Equal(got, data) {
		t.Errorf("the restored link does not hold the file's content")
	}
}

// Symbolic links are accounted for: one that resolves inside the directory
// is recorded as written and restored by stage-in; one that leads out
// (absolute, up past the root, out through another link) or to nothing is
// listed as unsaved with its reason, which makes the run incomplete.
func TestSymbolicLinks(t *testing.T) {
	u := "mem://links/sym/"
	be, loc := storagetest.Open(t, u)
	vol := t.TempDir()
	src := filepath.Join(vol, "out")
	mustDo(t, os.MkdirAll(filepath.Join(src, "data"), 0o755))
	mustDo(t, os.MkdirAll(filepath.Join(src, "in"), 0o755))
	mustDo(t, os.MkdirAll(filepath.Join(src, "c"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(vol, "secret"), []byte("not an output"), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(src, "data/f.txt"), []byte("f"), 0o644))
	for link, target := range map[string]string{
		"in/file":  "../data/f.txt",
		"in/dir":   "../data",
		"c/hop":    "..",
		"abs":      "/etc/passwd",
		"up":       "../secret",
		"dangling": "nowhere",
		"c/out":    "hop/../secret", // the text stays inside, the link leads out
	} {
		mustDo(t, os.Symlink(target, filepath.Join(src, link)))
	}
	o := outOpts(be, src, u)
	o.VolumeRoot = vol
	res, err := stageout.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	m := readManifest(t, be, loc)
	wantLinks := []stagecontract.ManifestLink{
		{Path: "c/hop", Kind: stagecontract.LinkSymbolic, Target: ".."},
		{Path: "in/dir", Kind: stagecontract.LinkSymbolic, Target: "../data"},
		{Path: "in/file", Kind: stagecontract.LinkSymbolic, Target: "../data/f.txt"},
	}
	gotLinks := slices.SortedFunc(slices.Values(m.Links), func(a, b stagecontract.ManifestLink) int { return strings.Compare(a.Path, b.Path) })
	if diff := cmp.Diff(wantLinks, gotLinks); diff != "" {
		t.Errorf("manifest links (-want +got):\n%s", diff)
	}
	wantUnsaved := []stagecontract.UnsavedFile{
		{Path: "abs", Reason: walk.ReasonLinkOut},
		{Path: "c/out", Reason: walk.ReasonLinkOut},
		{Path: "dangling", Reason: walk.ReasonLinkDangling},
		{Path: "up", Reason: walk.ReasonLinkOut},
	}
	if diff := cmp.Diff(wantUnsaved, m.Unsaved); diff != "" {
		t.Errorf("manifest unsaved (-want +got):\n%s", diff)
	}
	if res.Unsaved != int64(len(wantUnsaved)) {
		t.Errorf("result unsaved %d, want %d (the run is incomplete)", res.Unsaved, len(wantUnsaved))
	}
	if len(m.Files) != 1 || m.Files[0].Key != "data/f.txt" {
		t.Errorf("manifest files %+v, want data/f.txt alone: a link's target is not stored twice", m.Files)
	}

	dst := t.TempDir()
	if _, err := stagein.Run(context.Background(), inOpts(be, loc.KeyURL(loc.Prefix+stagecontract.ManifestKey), dst)); err != nil {
		t.Fatal(err)
	}
	for _, l := range wantLinks {
		if got, err := os.Readlink(filepath.Join(dst, l.Path)); err != nil || got != l.Target {
			t.Errorf("restored %s: %q, %v; want a symbolic link to %q", l.Path, got, err, l.Target)
		}
	}
	if got, err := os.ReadFile(filepath.Join(dst, "in/dir/f.txt")); err != nil || string(got) != "f" {
		t.Errorf("read through the restored link in/dir: %q, %v", got, err)
	}
	for _, u := range wantUnsaved {
		if _, err := os.Lstat(filepath.Join(dst, u.Path)); err == nil {
			t.Errorf("restored %s, an unsaved link", u.Path)
		}
	}
}

// A hard link whose file was not stored (it vanished after the walk) is
// unsaved too, not recorded as a link to nothing.
func TestHardLinkToUnsavedFile(t *testing.T) {
	u := "mem://links/unsaved/"
	mem, loc := storagetest.Open(t, u)
	src := t.TempDir()
	mustDo(t, os.WriteFile(filepath.Join(src, "a"), []byte("a"), 0o644))
	mustDo(t, os.Link(filepath.Join(src, "a"), filepath.Join(src, "b")))
	be := &hookBackend{Backend: mem, afterWalk: func() {
		mustDo(t, os.Remove(filepath.Join(src, "a")))
		mustDo(t, os.Remove(filepath.Join(src, "b")))
	}}
	res, err := stageout.Run(context.Background(), outOpts(be, src, u))
	if err != nil {
		t.Fatal(err)
	}
	m := readManifest(t, mem, loc)
	if len(m.Files) != 0 || len(m.Links) != 0 || len(m.Unsaved) != 2 || res.Unsaved != 2 {
		t.Fatalf("manifest files %+v, links %+v, unsaved %+v (result %d); want both names unsaved", m.Files, m.Links, m.Unsaved, res.Unsaved)
	}
	reasons := []string{m.Unsaved[0].Reason, m.Unsaved[1].Reason}
	slices.Sort(reasons)
	if want := []string{stageout.ReasonLinkUnsaved, stageout.ReasonVanished}; !slices.Equal(reasons, want) {
		t.Errorf("unsaved reasons %q, want %q", reasons, want)
	}
}
