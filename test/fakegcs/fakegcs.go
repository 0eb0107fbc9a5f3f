// Package fakegcs serves fake-gcs-server, a Google Cloud Storage emulator,
// in the test process, for gs:// (gocloud's gcsblob over the real
// cloud.google.com/go/storage client). It is its own package so that only
// the suites that run it (storagetest) compile it.
package fakegcs

import (
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// Start serves an in-memory emulator on a random 127.0.0.1 port and points
// the GCS client at it for the rest of the test: STORAGE_EMULATOR_HOST,
// which the Google client honours with no credentials (gocloud then skips
// the credential lookup too). Each bucket must be made with MakeBucket.
func Start(t testing.TB) *fakestorage.Server {
	t.Helper()
	// The client reads objects with the XML API at
	// http://host:port/bucket/object; the emulator routes that path to a
	// download only for its "public host", so the port is chosen first
	// and the public host is the listening address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	l.Close()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http", Host: "127.0.0.1", Port: uint16(addr.Port),
		PublicHost: "127.0.0.1:" + strconv.Itoa(addr.Port),
		Writer:     io.Discard,
	})
	if err != nil {
		t.Fatalf("start fake-gcs-server: %v", err)
	}
	t.Cleanup(srv.Stop)
	t.Setenv("STORAGE_EMULATOR_HOST", addr.String())
	return srv
}

// MakeBucket creates bucket on srv.
func MakeBucket(srv *fakestorage.Server, bucket string) {
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
}
