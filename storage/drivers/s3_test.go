package drivers

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/s3server"
)

// A rerun's multipart upload of a key aborts the uploads an interrupted run
// left behind, so abandoned parts do not pile up.
func TestBeginAbortsStaleUploads(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "stale")
	loc, err := storage.ParseURL(srv.URL("stale", "p/"))
	if err != nil {
		t.Fatal(err)
	}
	be, err := storage.Open(context.Background(), loc, storage.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s3 := be.(*s3Backend)
	ctx := context.Background()
	key := "p/big"
	for range 2 { // two crashed runs
		up, err := s3.Begin(ctx, key, storage.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := up.PutPart(ctx, 1, bytes.NewReader(make([]byte, 5<<20)), 5<<20); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s3.core.ListMultipartUploads(ctx, "stale", key, "", "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Uploads); n != 1 {
		t.Errorf("%d multipart uploads of %s in progress, want only the latest", n, key)
	}
}

// A cancelled listing stops: stage-in and the stage-out's resume check list
// under the run's context, and a deadline must end them (issue #12).
func TestListHonoursContext(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "listctx")
	loc, err := storage.ParseURL(srv.URL("listctx", ""))
	if err != nil {
		t.Fatal(err)
	}
	be, err := storage.Open(context.Background(), loc, storage.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.Put(context.Background(), "k", bytes.NewReader([]byte("x")), 1, storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	err = be.List(ctx, "", func(storage.ObjectInfo) error { n++; return nil })
	if err == nil || n != 0 {
		t.Errorf("List under a cancelled context: %d objects, err %v; want no request and an error", n, err)
	}
}

// A bucket name S3 cannot have is a permanent error at open, naming the
// bucket and the fix, not a transient one retried until the deadline (the
// client refuses such names on every request without asking the server).
func TestOpenRefusesAnInvalidBucketName(t *testing.T) {
	for _, bucket := range []string{"b", "-ab", "ab..c"} {
		loc, err := storage.ParseURL("s3://" + bucket + "/p/?endpoint=http://127.0.0.1:1")
		if err != nil {
			t.Fatal(err)
		}
		_, err = storage.Open(context.Background(), loc, storage.OpenOptions{})
		var se *storage.Error
		if !errors.As(err, &se) || se.Class != storage.Permanent || !strings.Contains(err.Error(), bucket) || !strings.Contains(se.Fix, "bucket name") {
			t.Errorf("bucket %q: open = %v, want a permanent error naming it and the fix", bucket, err)
		}
	}
}
