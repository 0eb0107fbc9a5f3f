package drivers

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/s3server"
)

// lossyProxy sits in front of MinIO: it lets the first
// CompleteMultipartUpload through but drops its answer (the server killed
// after it assembled the object), then answers the next failHeads HEADs
// with 503, as a server on its way back does.
type lossyProxy struct {
	rp        *httputil.ReverseProxy
	mu        sync.Mutex
	completes int
	failHeads int
	heads503  int
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	complete := r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
	if complete {
		p.completes++
	}
	first := complete && p.completes == 1
	fail := r.Method == http.MethodHead && p.completes > 0 && p.heads503 < p.failHeads
	if fail {
		p.heads503++
	}
	p.mu.Unlock()
	switch {
	case first:
		p.rp.ServeHTTP(httptest.NewRecorder(), r) // MinIO completes the upload
		panic(http.ErrAbortHandler)               // and its answer is lost
	case fail:
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// A Complete whose answer was lost is retried; the server no longer knows
// the upload (NoSuchUpload) because it completed it, and the object it made
// is accepted, also when the first look at it fails: that failure is
// retried, not taken for NoSuchUpload's permanent 404.
func TestCompleteAnswerLost(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "lost")
	u, _ := url.Parse(srv.Endpoint())
	for _, failHeads := range []int{0, 1} {
		p := &lossyProxy{rp: httputil.NewSingleHostReverseProxy(u), failHeads: failHeads}
		proxy := httptest.NewServer(p)
		be := openURL(t, s3server.S3URL(proxy.Listener.Addr().String(), "lost", ""))
		ctx := context.Background()
		data := bytes.Repeat([]byte{byte('a' + failHeads)}, 5<<20+17)
		up, err := be.(storage.Multipart).Begin(ctx, "big", storage.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var parts []storage.Part
		for i, off := range []int{0, 5 << 20} {
			part, err := up.PutPart(ctx, i+1, bytes.NewReader(data[off:min(off+5<<20, len(data))]), int64(min(5<<20, len(data)-off)))
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, part)
		}
		crc := storage.CombineCRC32C(parts[0].CRC, parts[1].CRC, parts[1].Size)
		retry := storage.RetryPolicy{Attempts: 5, Base: time.Millisecond, Max: 10 * time.Millisecond}
		err = retry.Do(ctx, func(ctx context.Context) error { return up.Complete(ctx, parts, crc) })
		if err != nil {
			t.Errorf("%d failed looks: complete after its answer was lost: %v", failHeads, err)
		} else if p.completes < 2 || p.heads503 != failHeads {
			t.Errorf("%d failed looks: %d completes, %d looks refused: the faults did not happen", failHeads, p.completes, p.heads503)
		}
		r, _, err := be.NewReader(ctx, "big", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%d failed looks: read back %d bytes (%v), want the %d uploaded", failHeads, len(got), err, len(data))
		}
		proxy.Close()
	}
}
