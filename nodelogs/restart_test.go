package nodelogs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kdefer/kdefer/stagecontract"
)

// An agent that starts after the files were written links them in write
// order; an agent restarted later links nothing twice, and serves what the
// one before it linked once the kubelet's files are gone.
func TestRestart(t *testing.T) {
	s := newSpool(t, time.Hour)
	p := testPod("p")
	c := newContainer(t, s, p)

	// Written in this order, but created in another: a listing sorts by
	// name and the inodes come in creation order, neither is write order.
	type gen struct{ file, rotated, text string }
	gens := []gen{
		{"0.log", "0.log.20261204-140000", "attempt 0, first"},
		{"0.log", "0.log.20261204-140010", "attempt 0, second"},
		{"0.log", "", "attempt 0, last"},
		{"1.log", "1.log.20261204-140100", "attempt 1, first"},
		{"1.log", "", "attempt 1, last"},
	}
	for _, i := range []int{4, 2, 0, 3, 1} {
		name := gens[i].file
		if gens[i].rotated != "" {
			name = gens[i].rotated
		}
		c.open(name)
		c.line("stdout", "F", gens[i].text)
	}
	c.close()
	c.take()
	// Compressed before any agent saw it: not kept (the package doc says so).
	if err := os.WriteFile(filepath.Join(c.dir, "0.log.20261204-135950.gz"), []byte("gzip"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "0.log.20261204-140020.gz.tmp"), []byte("gzip"), 0o640); err != nil {
		t.Fatal(err)
	}

	s.Keep(p)
	wantLinks := []string{"000000-000000.log", "000000-000001.log", "000000-000002.log", "000001-000003.log", "000001-000004.log"}
	got := links(t, s, p)
	if !slices.Equal(got, wantLinks) {
		t.Fatalf("links: %v, want %v", got, wantLinks)
	}
	for i, g := range gens {
		name := g.file
		if g.rotated != "" {
			name = g.rotated
		}
		if !sameFile(t, filepath.Join(c.dir, name), filepath.Join(s.Dir, string(p.UID), "main", wantLinks[i])) {
			t.Errorf("link %s is not %s", wantLinks[i], name)
		}
	}
	prev := stagecontract.LogRef{Container: "main", Previous: true}
	checkLog(t, s, p, prev, "attempt 0, first\nattempt 0, second\nattempt 0, last\n")
	checkLog(t, s, p, mainLog, "attempt 1, first\nattempt 1, last\n")

	// The agent restarts; the kubelet's files are still there.
	s2 := restarted(t, s)
	s2.Keep(p)
	if got := links(t, s2, p); !slices.Equal(got, wantLinks) {
		t.Fatalf("links after a restart: %v, want %v (nothing linked twice)", got, wantLinks)
	}
	// A rotation after the restart: the new file comes after the old links.
	c.open("1.log")
	c.line("stdout", "F", "attempt 1, more")
	if err := os.Rename(filepath.Join(c.dir, "1.log"), filepath.Join(c.dir, "1.log.20261204-140200")); err != nil {
		t.Fatal(err)
	}
	c.open("1.log")
	c.line("stdout", "F", "attempt 1, after the rotation")
	c.close()
	s2.Keep(p) // a rescan
	if got, want := links(t, s2, p), append(slices.Clone(wantLinks), "000001-000005.log"); !slices.Equal(got, want) {
		t.Fatalf("links after a rotation: %v, want %v", got, want)
	}

	// The kubelet removes the pod's logs; a third agent, which never kept
	// the pod, serves what the others linked.
	if err := os.RemoveAll(filepath.Join(s.PodLogsDir, p.dirName())); err != nil {
		t.Fatal(err)
	}
	s3 := restarted(t, s)
	checkLog(t, s3, p, prev, "attempt 0, first\nattempt 0, second\nattempt 0, last\n")
	checkLog(t, s3, p, mainLog, "attempt 1, first\nattempt 1, last\nattempt 1, more\nattempt 1, after the rotation\n")
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Lstat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Lstat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}
