package drivers

import (
	"context"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/kdefer/kdefer/storage"
)

func TestS3ChecksumWireForm(t *testing.T) {
	if got, ok := parseBase64CRC(base64CRC(0xdeadbeef)); !ok || got != 0xdeadbeef {
		t.Errorf("base64 round trip: %08x %v", got, ok)
	}
	if _, ok := parseBase64CRC("3q2+7w==-3"); ok {
		t.Errorf("composite checksum accepted as full-object")
	}
}

func TestClassifyS3(t *testing.T) {
	tests := []struct {
		err  error
		want storage.Class
	}{
		{minio.ErrorResponse{Code: "AccessDenied", StatusCode: 403}, storage.Permanent},
		{minio.ErrorResponse{Code: "NoSuchBucket", StatusCode: 404}, storage.Permanent},
		{minio.ErrorResponse{Code: "InvalidAccessKeyId", StatusCode: 403}, storage.Permanent},
		{minio.ErrorResponse{Code: "SignatureDoesNotMatch", StatusCode: 403}, storage.Permanent},
		{minio.ErrorResponse{Code: "SlowDown", StatusCode: 503}, storage.Transient},
		{minio.ErrorResponse{Code: "InternalError", StatusCode: 500}, storage.Transient},
		{minio.ErrorResponse{Code: "RequestTimeout", StatusCode: 400}, storage.Transient},
		{minio.ErrorResponse{Code: "Weird", StatusCode: 403}, storage.Permanent},
	}
	for _, tc := range tests {
		if got := storage.ClassOf(tc.err); got != tc.want {
			t.Errorf("ClassOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestOpenS3RejectsUnknownParameter(t *testing.T) {
	loc, err := storage.ParseURL("s3://b/p?endpoint=http://127.0.0.1:1&use_path_styl=true")
	if err != nil {
		t.Fatal(err)
	}
	_, err = storage.Open(context.Background(), loc, storage.OpenOptions{})
	if err == nil || !strings.Contains(err.Error(), `"use_path_styl"`) || storage.ClassOf(err) != storage.Permanent {
		t.Errorf("storage.Open with a misspelt parameter: %v, want a permanent error naming it", err)
	}
	loc, _ = storage.ParseURL("s3://b/p?endpoint=ftp://u:pw@h")
	if _, err = storage.Open(context.Background(), loc, storage.OpenOptions{}); err == nil || strings.Contains(err.Error(), "pw") {
		t.Errorf("storage.Open with a bad endpoint: %v (must fail and not echo credentials)", err)
	}
}
