//go:build linux

package stageout_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// A file whose holes exceed the limit is listed as unsaved with the reason
// instead of being read and sent as zeros; one with smaller holes is stored
// exactly, zeros included.
func TestSparseFiles(t *testing.T) {
	defer stageout.SetMaxHoles(4 << 20)()
	u := "mem://sparse/run/"
	be, loc := storagetest.Open(t, u)
	src := t.TempDir()
	data := storagetest.RandBytes(9, 64<<10)
	sparse := func(name string, size int64) {
		f, err := os.Create(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(data, size/2); err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
	}
	sparse("huge.img", 64<<20) // 64 MiB, 64 KiB of data
	sparse("small.img", 2<<20) // 2 MiB, holes under the limit
	if err := os.WriteFile(filepath.Join(src, "dense.bin"), make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err) // written zeros are data, not holes
	}
	if _, err := stageout.Run(context.Background(), outOpts(be, src, u)); err != nil {
		t.Fatalf("stage-out: %v", err)
	}
	m := readManifest(t, be, loc)
	var keys []string
	for _, f := range m.Files {
		keys = append(keys, f.Key)
	}
	slices.Sort(keys)
	if diff := cmp.Diff([]string{"dense.bin", "small.img"}, keys); diff != "" {
		t.Errorf("stored (-want +got):\n%s", diff)
	}
	want := []stagecontract.UnsavedFile{{Path: "huge.img", Reason: "sparse file: 67043328 of its 67108864 bytes are holes, more than the 4194304 uploaded as zeros"}}
	if diff := cmp.Diff(want, m.Unsaved); diff != "" {
		t.Errorf("unsaved (-want +got):\n%s", diff)
	}
	got := storagetest.Read(t, be, loc.Prefix+"small.img", 0, -1)
	wantSmall := make([]byte, 2<<20)
	copy(wantSmall[1<<20:], data)
	if string(got) != string(wantSmall) {
		t.Error("small.img stored differs from the file")
	}
}
