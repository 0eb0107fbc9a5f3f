package stagein_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/rs/zerolog"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
	"github.com/kdefer/kdefer/test/s3server"
)

// An object replaced after its stage-out by same-size different bytes, on a
// real S3 server (MinIO). The replacement is an ordinary PUT, so the server
// stores a CRC32C of the new bytes and its own checksum agrees with them:
// only the manifest, which recorded the CRC32C of what stage-out sent, can
// tell. Stage-in from that manifest must refuse the object, naming its key,
// the CRC32C it read and the manifest's, and write nothing under its name.
// Sizes: a whole read, and one fetched in parallel ranges (over 64 MiB).
func TestManifestCatchesSameSizeReplacementS3(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	const bucket = "tamper"
	s3server.MakeBucket(t, srv.Addr(), bucket)
	for i, size := range []int{5000, 64<<20 + 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			if size > 1<<20 && testing.Short() {
				t.Skip("large object")
			}
			ctx := context.Background()
			prefix := fmt.Sprintf("p%d/", i)
			u := srv.URL(bucket, prefix)
			be, loc := storagetest.Open(t, u)
			src := t.TempDir()
			good := storagetest.RandBytes(uint64(40+i), size)
			stagetest.MakeTree(t, src, stagetest.Tree{"data.bin": good, "other.txt": []byte("fine\n")})
			o := stageout.Options{From: src, To: u, Version: "test",
				TransferOptions: storage.TransferOptions{Backend: be, Retry: stagetest.FastRetry(), Log: zerolog.Nop()}}
			if _, err := stageout.Run(ctx, o); err != nil {
				t.Fatalf("stage-out: %v", err)
			}

			bad := bytes.Clone(good)
			bad[size/2] ^= 0x01
			key := loc.Prefix + "data.bin"
			// Another S3 client, writing with a CRC32C that MinIO verifies and
			// keeps, as any client writing with checksums would.
			mc, err := minio.New(srv.Addr(), &minio.Options{Creds: credentials.NewStaticV4(s3server.AccessKey, s3server.SecretKey, ""),
				Region: "us-east-1", BucketLookup: minio.BucketLookupPath, TrailingHeaders: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := mc.PutObject(ctx, bucket, key, bytes.NewReader(bad), int64(size), minio.PutObjectOptions{
				Checksum: minio.ChecksumFullObjectCRC32C}); err != nil {
				t.Fatalf("replace %s: %v", key, err)
			}
			// The store's own word is no help: it vouches for the new bytes.
			if oi, err := be.Stat(ctx, key); err != nil || oi.Size != int64(size) || !oi.HasCRC32C || oi.CRC32C != storagetest.CRC(bad) {
				t.Fatalf("after the replacement Stat = %+v, %v; want size %d and the new bytes' crc32c:%08x", oi, err, size, storagetest.CRC(bad))
			}

			dst := t.TempDir()
			_, err = stagein.Run(ctx, inOpts(be, loc.KeyURL(loc.Prefix+stagecontract.ManifestKey), dst))
			t.Logf("stage-in: %v (class %v)", err, storage.ClassOf(err))
			wantCorrupt(t, err, dst, "data.bin",
				storage.FormatChecksum(storagetest.CRC(bad)), storage.FormatChecksum(storagetest.CRC(good)))
			if _, err := os.Lstat(filepath.Join(dst, "data.bin.kdefer-tmp")); err == nil {
				t.Errorf("the damaged download was left behind as data.bin.kdefer-tmp")
			}
		})
	}
}
