package stagein_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/storage/storagetest"
	"github.com/kdefer/kdefer/test/azurite"
)

// Without a manifest, an Azure object is checked against the MD5 Azure
// keeps of it: one byte of its stored content flipped on the server's disk
// (Azurite's extent files), the size unchanged, fails the stage-in
// permanently, naming the key and both MD5s. Sizes: a blob Azure wrote
// whole (it computes the MD5), and one committed from blocks (kdefer gives
// the MD5 with the block list).
func TestPrefixIntegrityAzurite(t *testing.T) {
	srv := azurite.Start(t)
	srv.MakeContainer(t, "tamper")
	for i, size := range []int{5000, 9 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			u := srv.URL("tamper", fmt.Sprintf("p%d/", i))
			be, loc := storagetest.Open(t, u)
			data := storagetest.RandBytes(uint64(70+i), size)
			storagetest.Put(t, be, loc.Prefix+"in/data.bin", data)
			storagetest.Put(t, be, loc.Prefix+"other.txt", []byte("fine"))

			flipOnDisk(t, srv.Dir, data[size/2:size/2+64])
			bad := bytes.Clone(data)
			bad[size/2] ^= 0xff
			dst := t.TempDir()
			_, err := stagein.Run(context.Background(), inOpts(be, u, dst))
			got, want := md5.Sum(bad), md5.Sum(data)
			wantCorrupt(t, err, dst, "in/data.bin", fmt.Sprintf("md5:%x", got), fmt.Sprintf("md5:%x", want))
		})
	}
}

// flipOnDisk flips the first byte of the one place under dir that holds
// marker.
func flipOnDisk(t *testing.T, dir string, marker []byte) {
	t.Helper()
	found := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if i := bytes.Index(b, marker); i >= 0 {
			found++
			b[i] ^= 0xff
			return os.WriteFile(path, b, 0o600)
		}
		return nil
	})
	if err != nil || found != 1 {
		t.Fatalf("damage the stored content: found it in %d files, %v", found, err)
	}
}
