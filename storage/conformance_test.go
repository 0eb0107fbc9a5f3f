package storage_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kdefer/kdefer/storage/storagetest"
	"github.com/kdefer/kdefer/test/s3server"
)

var seq atomic.Int64

func uniq(t *testing.T) string {
	return fmt.Sprintf("t%d", seq.Add(1))
}

func TestConformanceMem(t *testing.T) {
	storagetest.Run(t, storagetest.Harness{URL: func(t *testing.T) string {
		return "mem://bucket/" + uniq(t) + "/"
	}})
}

func TestConformanceFile(t *testing.T) {
	storagetest.Run(t, storagetest.Harness{URL: func(t *testing.T) string {
		return "file://" + t.TempDir() + "/bucket"
	}})
}

func TestConformanceVersityGW(t *testing.T) {
	addr := s3server.StartVersity(t)
	s3server.SetCredentials(t)
	// One gateway per process: a bucket per test run (-count=N).
	bucket := fmt.Sprintf("conformance-%d", seq.Add(1))
	s3server.MakeBucket(t, addr, bucket)
	storagetest.Run(t, storagetest.Harness{URL: func(t *testing.T) string {
		return s3server.S3URL(addr, bucket, uniq(t)+"/")
	}})
}

func TestConformanceMinIO(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	bucket := "conformance"
	s3server.MakeBucket(t, srv.Addr(), bucket)
	storagetest.Run(t, storagetest.Harness{URL: func(t *testing.T) string {
		return srv.URL(bucket, uniq(t)+"/")
	}})
}
