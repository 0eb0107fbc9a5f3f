package stagein_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// Hostile objects and manifests are refused on every store the Backend
// contract runs on, before a byte is written.
func TestEveryStore(t *testing.T) {
	storagetest.ForEachStore(t, func(t *testing.T, h storagetest.Harness) {
		t.Run("HostileKeys", func(t *testing.T) { testHostileKeys(t, h) })
		t.Run("HostileManifest", func(t *testing.T) { testHostileManifest(t, h) })
		t.Run("ReplacedObject", func(t *testing.T) { testReplacedObject(t, h) })
	})
}

func inOpts(be storage.Backend, from, to string) stagein.Options {
	return stagein.Options{From: from, To: to, TransferOptions: storage.TransferOptions{Backend: be, Retry: stagetest.FastRetry(), Log: zerolog.Nop()}}
}

// hostileKeys are object keys that must never become paths outside the
// destination directory (or at all).
var hostileKeys = []string{
	"../escape", "../../escape", "a/../../escape", "/abs", "a//b", "./a", "a/./b", "a/..",
	"..", "a\\..\\..\\escape", "ctl\nname", "_kdefer/manifest.json.evil-but-reserved/x",
}

func testHostileKeys(t *testing.T, h storagetest.Harness) {
	ctx := context.Background()
	for _, key := range hostileKeys {
		t.Run(strings.NewReplacer("/", "_", "\n", "NL", "\\", "BS").Replace(key), func(t *testing.T) {
			u := h.URL(t)
			be, loc := storagetest.Open(t, u)
			storagetest.Put(t, be, loc.Prefix+"ok.txt", []byte("fine"))
			if _, err := be.Put(ctx, loc.Prefix+key, bytes.NewReader([]byte("evil")), 4, storage.PutOptions{}); err != nil {
				t.Skipf("the server refuses key %q itself: %v", key, err)
			}
			// Some stores normalise keys; test what was actually stored.
			// Nothing may be written anywhere: not in dst, not beside it.
			outside := t.TempDir()
			dst := filepath.Join(outside, "dst")
			_, err := stagein.Run(ctx, inOpts(be, u, dst))
			var listed []string
			_ = be.List(ctx, loc.Prefix, func(oi storage.ObjectInfo) error { listed = append(listed, oi.Key); return nil })
			hostile := false
			for _, k := range listed {
				if k != loc.Prefix+"ok.txt" && storage.CheckRel(strings.TrimPrefix(k, loc.Prefix)) != nil && !strings.HasPrefix(strings.TrimPrefix(k, loc.Prefix), stagecontract.ReservedDir) {
					hostile = true
				}
			}
			if !hostile {
				t.Skipf("the store normalised %q into harmless keys %q", key, listed)
			}
			if storage.ClassOf(err) != storage.Permanent || err == nil {
				t.Errorf("stage-in with key %q: err = %v, want a permanent error", key, err)
			}
			if got := stagetest.ReadTree(t, outside); len(got) != 0 {
				t.Errorf("files written although a hostile key refuses the run: %v", got.Keys())
			}
		})
	}

	// A symlink inside the destination that points outside it.
	t.Run("SymlinkedParent", func(t *testing.T) {
		u := h.URL(t)
		be, loc := storagetest.Open(t, u)
		storagetest.Put(t, be, loc.Prefix+"link/evil.txt", []byte("evil"))
		dst, out := t.TempDir(), t.TempDir()
		if err := os.Symlink(out, filepath.Join(dst, "link")); err != nil {
			t.Fatal(err)
		}
		_, err := stagein.Run(ctx, inOpts(be, u, dst))
		if err == nil || storage.ClassOf(err) != storage.Permanent {
			t.Errorf("stage-in through a symlinked parent: err = %v, want permanent", err)
		}
		if got := stagetest.ReadTree(t, out); len(got) != 0 {
			t.Errorf("files written through the symlink: %v", got.Keys())
		}
	})
}

func testHostileManifest(t *testing.T, h storagetest.Harness) {
	ctx := context.Background()
	u := h.URL(t)
	be, loc := storagetest.Open(t, u)
	storagetest.Put(t, be, loc.Prefix+"a.txt", []byte("a"))
	m := fmt.Sprintf(`{"version":1,"tool":"x","prefix":"x","start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:00:00Z","totalBytes":2,"files":[
		{"key":"a.txt","size":1,"checksum":"%s","mtime":"2026-01-01T00:00:00Z"},
		{"key":"../escape","size":1,"checksum":"%s","mtime":"2026-01-01T00:00:00Z"}]}`,
		storage.FormatChecksum(storagetest.CRC([]byte("a"))), storage.FormatChecksum(storagetest.CRC([]byte("a"))))
	storagetest.Put(t, be, loc.Prefix+stagecontract.ManifestKey, []byte(m))
	parent := t.TempDir()
	dst := filepath.Join(parent, "dst")
	_, err := stagein.Run(ctx, inOpts(be, loc.KeyURL(loc.Prefix+stagecontract.ManifestKey), dst))
	if err == nil || storage.ClassOf(err) != storage.Permanent {
		t.Errorf("stage-in of a hostile manifest: err = %v, want permanent", err)
	}
	if got := stagetest.ReadTree(t, parent); len(got) != 0 {
		t.Errorf("stage-in of a hostile manifest wrote %v", got.Keys())
	}
}
