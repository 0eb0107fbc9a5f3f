package storagetest

import (
	"fmt"
	"sync/atomic"
	"testing"

	// Every store a harness names must open: the drivers register on import.
	_ "github.com/kdefer/kdefer/storage/drivers"
	"github.com/kdefer/kdefer/test/azurite"
	"github.com/kdefer/kdefer/test/fakegcs"
	"github.com/kdefer/kdefer/test/fakes3"
	"github.com/kdefer/kdefer/test/s3server"
)

// seq makes prefixes and gateway buckets unique within a test process.
var seq atomic.Int64

func uniq() string { return fmt.Sprintf("t%d", seq.Add(1)) }

// Mem is an in-memory store (gocloud's memblob).
func Mem(*testing.T) Harness {
	return Harness{URL: func(*testing.T) string { return "mem://bucket/" + uniq() + "/" }}
}

// File is a directory store (gocloud's fileblob), a fresh one per URL.
func File(*testing.T) Harness {
	return Harness{URL: func(t *testing.T) string { return "file://" + t.TempDir() + "/bucket" }}
}

// VersityGW is versitygw's S3 gateway, embedded in the test process.
func VersityGW(t *testing.T) Harness {
	addr := s3server.StartVersity(t)
	s3server.SetCredentials(t)
	// One gateway per process: a bucket per caller (and per -count=N run).
	bucket := fmt.Sprintf("conformance-%d", seq.Add(1))
	s3server.MakeBucket(t, addr, bucket)
	return Harness{URL: func(*testing.T) string { return s3server.S3URL(addr, bucket, uniq()+"/") }, CRC32C: true}
}

// GoFakeS3 is gofakes3, an S3 implementation independent of the other two,
// in process (fakes3.Start says how it differs).
func GoFakeS3(t *testing.T) Harness {
	addr := fakes3.Start(t)
	s3server.SetCredentials(t)
	bucket := fmt.Sprintf("conformance-%d", seq.Add(1))
	s3server.MakeBucket(t, addr, bucket)
	return Harness{URL: func(*testing.T) string { return fakes3.URL(addr, bucket, uniq()+"/") }, NoCRC32C: true}
}

// MinIO is a real MinIO server ($KDEFER_MINIO) started for the test; the
// test is skipped without it unless KDEFER_REQUIRE_TOOLS=1.
func MinIO(t *testing.T) Harness {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	bucket := "conformance"
	s3server.MakeBucket(t, srv.Addr(), bucket)
	return Harness{URL: func(*testing.T) string { return srv.URL(bucket, uniq()+"/") }, CRC32C: true}
}

// GCS is fake-gcs-server, a Google Cloud Storage emulator, in process, for
// gs://: the real GCS client (JSON API for writes and listings, XML API for
// reads) through gocloud's gcsblob, pointed at it by STORAGE_EMULATOR_HOST.
func GCS(t *testing.T) Harness {
	srv := fakegcs.Start(t)
	bucket := fmt.Sprintf("conformance-%d", seq.Add(1))
	fakegcs.MakeBucket(srv, bucket)
	return Harness{URL: func(*testing.T) string { return "gs://" + bucket + "/" + uniq() + "/" }, CRC32C: true}
}

// Azurite is Azurite's blob service ($KDEFER_AZURITE), started for the test,
// for azblob://; the test is skipped without it unless KDEFER_REQUIRE_TOOLS=1.
func Azurite(t *testing.T) Harness {
	srv := azurite.Start(t)
	container := fmt.Sprintf("conformance-%d", seq.Add(1))
	srv.MakeContainer(t, container)
	return Harness{URL: func(*testing.T) string { return srv.URL(container, uniq()+"/") }}
}

// Stores are the stores every suite runs against, by subtest name.
var Stores = []struct {
	Name  string
	Start func(*testing.T) Harness
}{
	{"Mem", Mem},
	{"File", File},
	{"VersityGW", VersityGW},
	{"GoFakeS3", GoFakeS3},
	{"MinIO", MinIO},
	{"GCS", GCS},
	{"Azurite", Azurite},
}

// ForEachStore runs fn in a subtest per store, each store started once for
// all the cases fn runs.
func ForEachStore(t *testing.T, fn func(t *testing.T, h Harness)) {
	for _, s := range Stores {
		t.Run(s.Name, func(t *testing.T) { fn(t, s.Start(t)) })
	}
}
