package s3server

import (
	"net/http/httptest"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// StartGoFakeS3 serves gofakes3 (its in-memory backend) from the test
// process and returns its address: a second S3 implementation, written
// independently of MinIO and versitygw, with quirks of its own (README
// "Storage backends"): it keeps no CRC32C (x-amz-checksum-* headers are
// dropped, so skip checks fall back to the single-part ETag, an MD5), and it
// decodes only signed aws-chunked bodies, not the unsigned trailer encoding
// kdefer's default checksum=crc32c streams with, so its URLs carry
// checksum=md5 (GoFakeS3URL).
func StartGoFakeS3(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// GoFakeS3URL is S3URL with the checksum mode gofakes3 can store.
func GoFakeS3URL(addr, bucket, prefix string) string {
	return S3URL(addr, bucket, prefix) + "&checksum=md5"
}
