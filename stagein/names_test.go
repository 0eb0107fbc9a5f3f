package stagein_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// A manifest file stored under an encoded key (a name the store cannot
// hold) is restored under its original name; an encoded key whose name
// would leave the destination is refused before anything is written.
func TestEncodedNames(t *testing.T) {
	u := "mem://encoded/run/"
	be, loc := storagetest.Open(t, u)
	tree := stagetest.Tree{"ok.txt": []byte("plain"), "new\nline.txt": []byte("newline"), "bad\xff/x.dat": []byte("not UTF-8"), "_kdefer/x": []byte("reserved")}
	var files []string
	for _, name := range tree.Keys() {
		key, _, err := storage.KeyFor("", name)
		if err != nil {
			t.Fatal(err)
		}
		crc := storagetest.Put(t, be, loc.Prefix+key, tree[name])
		files = append(files, manifestFile(key, name, len(tree[name]), crc))
	}
	putManifest(t, be, loc, files, len("plain")+len("newline")+len("not UTF-8")+len("reserved"))
	dst := t.TempDir()
	if _, err := stagein.Run(context.Background(), inOpts(be, u+stagecontract.ManifestKey, dst)); err != nil {
		t.Fatalf("stage-in: %v", err)
	}
	if diff := stagetest.DiffTrees(tree, stagetest.ReadTree(t, dst)); diff != "" {
		t.Errorf("restored tree:\n%s", diff)
	}

	// "../" + newline: decodes to a name outside the destination.
	key := storage.EncodedDir + "../evil%0A"
	crc := storagetest.Put(t, be, loc.Prefix+key, []byte("evil"))
	putManifest(t, be, loc, []string{manifestFile(key, "../evil\n", 4, crc)}, 4)
	dst = t.TempDir()
	if _, err := stagein.Run(context.Background(), inOpts(be, u+stagecontract.ManifestKey, dst)); err == nil {
		t.Error("stage-in accepted an encoded key naming ../evil")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "evil\n")); err == nil {
		t.Error("stage-in wrote outside its destination")
	}
}

func manifestFile(key, name string, size int, crc uint32) string {
	path := ""
	if key != name {
		path = storage.ManifestPath(name)
	}
	return fmt.Sprintf(`{"key":%s,"path":%s,"size":%d,"checksum":%q,"mtime":"2026-01-01T00:00:00Z"}`,
		strconv.Quote(key), strconv.Quote(path), size, storage.FormatChecksum(crc))
}

func putManifest(t *testing.T, be storage.Backend, loc storage.Location, files []string, total int) {
	t.Helper()
	m := fmt.Sprintf(`{"version":1,"tool":"t","prefix":"mem://encoded/run/","start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:00:00Z","totalBytes":%d,"files":[%s]}`,
		total, strings.Join(files, ","))
	storagetest.Put(t, be, loc.Prefix+stagecontract.ManifestKey, []byte(m))
}
