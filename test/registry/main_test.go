package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPushPullBlobsOnDisk: an image pushed over plain HTTP comes back with
// the same digest, and with --blobs its layers are files in that directory.
func TestPushPullBlobsOnDisk(t *testing.T) {
	dir := t.TempDir()
	h, err := handler(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(srv.URL, "http://") + "/kdefer/test:v1")
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if d, _ := got.Digest(); d != want {
		t.Errorf("pulled %s, pushed %s", d, want)
	}
	layers, _ := img.Layers()
	for _, l := range layers {
		d, _ := l.Digest()
		if _, err := os.Stat(filepath.Join(dir, d.Algorithm, d.Hex)); err != nil {
			t.Errorf("layer %s not on disk: %v", d, err)
		}
	}
}
