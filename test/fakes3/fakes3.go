// Package fakes3 serves gofakes3 in the test process. It is its own package,
// not part of s3server, so that only the suites that run it (storagetest)
// compile it, not the e2e tier or the demo that import s3server.
package fakes3

import (
	"net/http/httptest"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/kdefer/kdefer/test/s3server"
)

// Start serves gofakes3 (its in-memory backend) from the test
// process and returns its address: a second S3 implementation, written
// independently of MinIO and versitygw, with quirks of its own (docs/stage.md,
// "Storage backends"): it keeps no CRC32C (x-amz-checksum-* headers are
// dropped, so skip checks fall back to the single-part ETag, an MD5), and it
// decodes only signed aws-chunked bodies, not the unsigned trailer encoding
// kdefer's default checksum=crc32c streams with, so its URLs carry
// checksum=md5 (URL).
func Start(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// URL is s3server.S3URL with the checksum mode gofakes3 can store.
func URL(addr, bucket, prefix string) string {
	return s3server.S3URL(addr, bucket, prefix) + "&checksum=md5"
}
