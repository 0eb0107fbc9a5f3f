//go:build linux

package stageout_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// hookBackend runs afterWalk when the engine first lists the prefix (the
// walk is over by then) and beforePut before the first Put of a key, so a
// test can change the source tree exactly between the walk and the reads.
type hookBackend struct {
	storage.Backend
	afterWalk func()
	beforePut map[string]func()
	mu        sync.Mutex
}

func (h *hookBackend) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	h.mu.Lock()
	if h.afterWalk != nil {
		h.afterWalk()
		h.afterWalk = nil
	}
	h.mu.Unlock()
	return h.Backend.List(ctx, prefix, fn)
}

func (h *hookBackend) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts storage.PutOptions) (uint32, error) {
	h.mu.Lock()
	hook := h.beforePut[key]
	delete(h.beforePut, key)
	h.mu.Unlock()
	if hook != nil {
		hook()
	}
	return h.Backend.Put(ctx, key, src, size, opts)
}

// readManifest returns the manifest a run left under loc.
func readManifest(t *testing.T, be storage.Backend, loc storage.Location) *stagecontract.Manifest {
	t.Helper()
	m, err := storage.ParseManifest(manifestBytes(t, be, loc))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// One file vanishing after the walk, one shrinking and one growing while
// read do not stop the others: every good file is stored, the vanished one
// is listed as unsaved with its reason, the others are stored as they were
// when read (size recorded = bytes stored = the file's size then), the
// manifest is written, and the run succeeds.
func TestBestEffort(t *testing.T) {
	u := "mem://besteffort/run/"
	mem, loc := storagetest.Open(t, u)
	src := t.TempDir()
	tree := stagetest.Tree{
		"a.txt":       []byte("alpha"),
		"d/b.dat":     storagetest.RandBytes(1, 300<<10),
		"d/gone.dat":  []byte("deleted after the walk"),
		"grows.log":   storagetest.RandBytes(2, 200<<10),
		"shrinks.dat": storagetest.RandBytes(3, 200<<10),
	}
	stagetest.MakeTree(t, src, tree)
	appended := []byte("appended while the upload ran\n")
	be := &hookBackend{Backend: mem,
		afterWalk: func() {
			if err := os.Remove(filepath.Join(src, "d/gone.dat")); err != nil {
				t.Error(err)
			}
		},
		beforePut: map[string]func(){
			loc.Prefix + "grows.log": func() {
				f, err := os.OpenFile(filepath.Join(src, "grows.log"), os.O_APPEND|os.O_WRONLY, 0)
				if err == nil {
					_, err = f.Write(appended)
					f.Close()
				}
				if err != nil {
					t.Error(err)
				}
			},
			loc.Prefix + "shrinks.dat": func() {
				if err := os.Truncate(filepath.Join(src, "shrinks.dat"), 100<<10); err != nil {
					t.Error(err)
				}
			},
		},
	}
	res, err := stageout.Run(context.Background(), outOpts(be, src, u))
	if err != nil {
		t.Fatalf("stage-out: %v (one bad file must not fail the run)", err)
	}
	want := stagetest.Tree{
		"a.txt":       tree["a.txt"],
		"d/b.dat":     tree["d/b.dat"],
		"grows.log":   append(append([]byte{}, tree["grows.log"]...), appended...),
		"shrinks.dat": tree["shrinks.dat"][:100<<10],
	}
	m := readManifest(t, mem, loc)
	got := stagetest.Tree{}
	for _, f := range m.Files {
		data := storagetest.Read(t, mem, loc.Prefix+f.Key, 0, -1)
		if int64(len(data)) != f.Size || storage.FormatChecksum(storagetest.CRC(data)) != f.Checksum {
			t.Errorf("%s: manifest says %d bytes %s, the object has %d bytes %s", f.Key, f.Size, f.Checksum, len(data), storage.FormatChecksum(storagetest.CRC(data)))
		}
		got[f.Key] = data
	}
	if diff := stagetest.DiffTrees(want, got); diff != "" {
		t.Errorf("stored files differ from the files as read:\n%s", diff)
	}
	wantUnsaved := []stagecontract.UnsavedFile{{Path: "d/gone.dat", Reason: "vanished after the walk"}}
	if diff := cmp.Diff(wantUnsaved, m.Unsaved); diff != "" {
		t.Errorf("manifest unsaved (-want +got):\n%s", diff)
	}
	if res.Unsaved != 1 {
		t.Errorf("result unsaved = %d, want 1", res.Unsaved)
	}
}
