package drivers

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/s3server"
)

// putOne opens raw as a stage step does and stores one small object.
func putOne(t *testing.T, raw string) error {
	t.Helper()
	loc, err := storage.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	be, err := storage.Open(context.Background(), loc, storage.OpenOptions{})
	if err != nil {
		return err
	}
	defer be.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = be.Put(ctx, loc.Prefix+"k", bytes.NewReader([]byte("x")), 1, storage.PutOptions{})
	return err
}

// A server with a region refuses requests signed for another (AWS, Ceph
// RGW zone groups, MinIO with a site region); the region comes from
// region=, AWS_REGION, AWS_DEFAULT_REGION or the profile's region.
func TestRegion(t *testing.T) {
	const region = "eu-west-9"
	srv := s3server.StartWith(t, s3server.Options{Region: region})
	s3server.SetCredentials(t)
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	c, err := minio.New(srv.Addr(), &minio.Options{Creds: credentials.NewStaticV4(s3server.AccessKey, s3server.SecretKey, ""), Region: region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MakeBucket(context.Background(), "regional", minio.MakeBucketOptions{Region: region}); err != nil {
		t.Fatal(err)
	}
	base := "s3://regional/p/?use_path_style=true&endpoint=" + url.QueryEscape(srv.Endpoint())
	// Without a region kdefer signs for us-east-1, the S3-compatible default.
	err = putOne(t, base)
	if err == nil {
		t.Fatalf("a server in %s took a request signed for us-east-1: this test proves nothing", region)
	}
	if storage.ClassOf(err) != storage.Permanent || !strings.Contains(err.Error(), "region=") {
		t.Errorf("wrong region: %v, want a permanent error whose fix names region=", err)
	}
	t.Run("region=", func(t *testing.T) {
		if err := putOne(t, base+"&region="+region); err != nil {
			t.Error(err)
		}
	})
	t.Run("AWS_REGION", func(t *testing.T) {
		t.Setenv("AWS_REGION", region)
		t.Setenv("AWS_DEFAULT_REGION", "us-east-1")
		if err := putOne(t, base); err != nil {
			t.Error(err)
		}
	})
	t.Run("AWS_DEFAULT_REGION", func(t *testing.T) {
		t.Setenv("AWS_DEFAULT_REGION", region)
		if err := putOne(t, base); err != nil {
			t.Error(err)
		}
	})
	t.Run("config file profile", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config")
		if err := os.WriteFile(cfg, []byte("[default]\nregion = us-east-1\n[profile site]\nregion = "+region+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_CONFIG_FILE", cfg)
		t.Setenv("AWS_PROFILE", "site")
		if err := putOne(t, base); err != nil {
			t.Error(err)
		}
	})
}

// Credentials come from the shared credentials file's AWS_PROFILE section
// when the environment has none: a site keeps one file with a profile per
// store.
func TestCredentialsProfile(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "prof")
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY"} {
		t.Setenv(k, "")
	}
	// The default profile has keys too (wrong ones), so a chain that
	// ignored AWS_PROFILE fails here instead of asking the instance
	// metadata service, which is no address a test may reach.
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = wrongkey\naws_secret_access_key = wrongsecret\n"+
		"[site]\naws_access_key_id = "+s3server.AccessKey+"\naws_secret_access_key = "+s3server.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	raw := srv.URL("prof", "p/")
	if err := putOne(t, raw); err == nil || storage.ClassOf(err) != storage.Permanent {
		t.Fatalf("the default profile's wrong keys: %v, want a permanent error", err)
	}
	t.Setenv("AWS_PROFILE", "site")
	if err := putOne(t, raw); err != nil {
		t.Errorf("AWS_PROFILE=site: %v", err)
	}
}
