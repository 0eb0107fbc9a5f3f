package drivers_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// Writes to file:// never leave the directory: a symlinked directory planted
// in it (a stage-out destination may be a volume untrusted code wrote, or
// hold links from before) is refused, naming the key and the link, and
// nothing is created, written or removed outside, temporary files and
// sidecars included.
func TestFileWritesStayInside(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "in")); err != nil {
		t.Fatal(err)
	}
	// A sidecar name linked to a file outside: metadata=sidecar must not
	// write through it.
	if err := os.Symlink(victim, filepath.Join(dir, "page.attrs")); err != nil {
		t.Fatal(err)
	}
	outsideEntries := func() []string {
		var names []string
		err := filepath.WalkDir(outside, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			names = append(names, strings.TrimPrefix(p, outside))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	before := outsideEntries()

	for _, q := range []string{"", "?metadata=sidecar"} {
		be, _ := storagetest.Open(t, "file://"+dir+q)
		for _, key := range []string{"sub/x", "sub/deeper/x", "sub/victim"} {
			data := []byte("data of " + key)
			_, err := be.Put(ctx, key, bytes.NewReader(data), int64(len(data)), storage.PutOptions{})
			if err == nil {
				t.Errorf("file://%s: Put(%q) through a link out of the directory succeeded", q, key)
				continue
			}
			t.Logf("file://%s: Put(%q): %v", q, key, err)
			if storage.ClassOf(err) != storage.Permanent || !strings.Contains(err.Error(), `"`+key+`"`) || !strings.Contains(err.Error(), `"sub"`) {
				t.Errorf("file://%s: Put(%q) = %v, want a permanent refusal naming the key and the link", q, key, err)
			}
		}
		if err := be.Delete(ctx, "sub/victim"); err == nil || storage.ClassOf(err) != storage.Permanent {
			t.Errorf("file://%s: Delete through a link out of the directory = %v, want a permanent refusal", q, err)
		}
		// A key beside the link is written as usual, and a link within
		// the directory is followed: the write lands inside.
		storagetest.Put(t, be, "page", []byte("inside"))
		if got := storagetest.Read(t, be, "page", 0, -1); string(got) != "inside" {
			t.Errorf("file://%s: page reads %q", q, got)
		}
		storagetest.Put(t, be, "in/y", []byte("via a link inside"))
		if got, err := os.ReadFile(filepath.Join(dir, "real", "y")); err != nil || string(got) != "via a link inside" {
			t.Errorf("file://%s: in/y through a link within the directory: real/y = %q, %v", q, got, err)
		}
	}
	if got, err := os.ReadFile(victim); err != nil || string(got) != "keep" {
		t.Errorf("the file outside now holds %q, %v; want it untouched", got, err)
	}
	if after := outsideEntries(); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("outside the directory: %q, was %q", after, before)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "page.attrs")); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		t.Errorf("the sidecar link was written through, not replaced")
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}
