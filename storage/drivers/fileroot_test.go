package drivers_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// kdefer reads file:// itself; what gocloud's fileblob wrote, under the
// names it escapes, reads back with its MD5.
func TestFileReadsWhatFileblobWrote(t *testing.T) {
	be, _ := storagetest.Open(t, storagetest.File(t).URL(t)+"?metadata=sidecar")
	ctx := context.Background()
	keys := []string{"plain.txt", "sp ace/x", "a__0x41__b", "__0x2f/x", "ctl\x01name", "dots../x", "uni☺"}
	for _, k := range keys {
		storagetest.Put(t, be, k, []byte("data of "+k))
	}
	listed := map[string]storage.ObjectInfo{}
	if err := be.List(ctx, "", func(oi storage.ObjectInfo) error { listed[oi.Key] = oi; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		want := []byte("data of " + k)
		oi, ok := listed[k]
		if !ok || oi.Size != int64(len(want)) || oi.MD5 == nil || oi.Refused != nil {
			t.Errorf("List: %q = %+v, %v; want size %d with an MD5", k, oi, ok, len(want))
		}
		if got := storagetest.Read(t, be, k, 0, -1); !bytes.Equal(got, want) {
			t.Errorf("read %q = %q", k, got)
		}
		if st, err := be.Stat(ctx, k); err != nil || st.MD5 == nil {
			t.Errorf("Stat(%q) = %+v, %v; want an MD5", k, st, err)
		}
	}
	if len(listed) != len(keys) {
		t.Errorf("List found %d objects, want %d: %v", len(listed), len(keys), listed)
	}
}

// Reads of file:// never leave the directory and open regular files only;
// every refusal is permanent and names the key.
func TestFileRefusesWhatIsNotAFileInside(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plant := map[string]func(string) error{
		"env":      func(p string) error { return os.Symlink("/proc/self/environ", p) },
		"abs-link": func(p string) error { return os.Symlink(filepath.Join(outside, "secret"), p) },
		"fifo":     func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"sub":      func(p string) error { return os.Symlink(outside, p) },
	}
	for name, fn := range plant {
		if err := fn(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "inside"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("inside", filepath.Join(dir, "link-inside")); err != nil {
		t.Fatal(err)
	}
	be, _ := storagetest.Open(t, "file://"+dir)
	for _, key := range []string{"env", "abs-link", "fifo", "sub/secret"} {
		_, err := be.Stat(ctx, key)
		_, _, rerr := be.NewReader(ctx, key, 0, -1)
		for _, err := range []error{err, rerr} {
			if storage.ClassOf(err) != storage.Permanent || errors.Is(err, storage.ErrNotExist) || !strings.Contains(err.Error(), `"`+key+`"`) {
				t.Errorf("read %q: err = %v, want a permanent refusal naming it", key, err)
			}
		}
	}
	if got := storagetest.Read(t, be, "link-inside", 0, -1); string(got) != "ok" {
		t.Errorf("a link within the directory reads %q, want its target's content", got)
	}
	refused := map[string]bool{}
	err := be.List(ctx, "", func(oi storage.ObjectInfo) error {
		refused[oi.Key] = oi.Refused != nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"env": true, "abs-link": true, "fifo": true, "sub": true, "inside": false, "link-inside": false}
	for k, w := range want {
		if got, ok := refused[k]; !ok || got != w {
			t.Errorf("List: %q listed %v, refused %v; want listed, refused %v", k, ok, got, w)
		}
	}
}

// file:// writes no ".attrs" sidecar unless metadata=sidecar asks for one
// (before, every object had one); without it the skip checks get a CRC32C
// from Stat, and a sidecar left by an earlier run never describes new
// content. With sidecars, the Content-Type by extension is recorded.
func TestFileSidecarsOnlyOnRequest(t *testing.T) {
	ctx := context.Background()
	url := storagetest.File(t).URL(t)
	dir := strings.TrimPrefix(url, "file://")
	put := func(be storage.Backend, data string) {
		t.Helper()
		if _, err := be.Put(ctx, "page.html", bytes.NewReader([]byte(data)), int64(len(data)), storage.PutOptions{ContentType: storage.ContentTypeOf("page.html")}); err != nil {
			t.Fatal(err)
		}
	}

	withMeta, _ := storagetest.Open(t, url+"?metadata=sidecar")
	put(withMeta, "<p>old</p>")
	attrs, err := os.ReadFile(filepath.Join(dir, "page.html.attrs"))
	if err != nil || !strings.Contains(string(attrs), `"user.content_type":"text/html; charset=utf-8"`) {
		t.Fatalf("metadata=sidecar: sidecar %s, %v; want one with the HTML content type", attrs, err)
	}

	be, _ := storagetest.Open(t, url)
	put(be, "<p>new content</p>")
	if _, err := os.Stat(filepath.Join(dir, "page.html.attrs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("default file:// left a sidecar: %v", err)
	}
	put(be, "<p>newer</p>")
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("default file:// directory holds %d entries, want only page.html", len(ents))
	}
	oi, err := be.Stat(ctx, "page.html")
	if err != nil || oi.MD5 != nil || !oi.HasCRC32C || oi.CRC32C != storagetest.CRC([]byte("<p>newer</p>")) {
		t.Errorf("Stat without sidecar = %+v, %v; want the CRC32C of the content", oi, err)
	}
}

// List opens directories only, as directories, non-blocking: a directory
// of a file:// source (a volume untrusted code may still write) swapped for
// a FIFO after its parent was read fails the listing at once, permanently
// and naming it, where fs.WalkDir's blocking open waited for a writer for
// good, SIGTERM included.
func TestFileListDirSwappedForFIFO(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Release a blocked open, should there be one.
		if w, err := os.OpenFile(sub, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	be, _ := storagetest.Open(t, "file://"+dir)
	done := make(chan error, 1)
	go func() {
		// A directory's files are listed before its subdirectories are
		// read (fs.WalkDir: in lexical order, "a" before "sub").
		done <- be.List(context.Background(), "", func(oi storage.ObjectInfo) error {
			if oi.Key != "a" {
				return nil
			}
			if err := os.Remove(sub); err != nil {
				return err
			}
			return syscall.Mkfifo(sub, 0o644)
		})
	}()
	select {
	case err := <-done:
		if storage.ClassOf(err) != storage.Permanent || !strings.Contains(err.Error(), `"sub"`) {
			t.Errorf("List = %v; want a permanent error naming sub", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("List still blocked 10 s after a directory became a FIFO")
	}
}
