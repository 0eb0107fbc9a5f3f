package stagecontract

import (
	"net/url"
	"strings"
	"testing"
)

func TestParseS3Query(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  string // a substring of the error, "" for success
	}{
		{"", ""},
		{"endpoint=minio:9000&disable_https=true&region=us-east-1&use_path_style=true&checksum=MD5&ca_bundle=/etc/ca.pem", ""},
		{"checksum=none", ""},
		{"use_path_styl=true", `"use_path_styl" is unknown`},
		{"checksum=sha1", `checksum="sha1" is not a checksum mode`},
		{"checksum=none&checksum=md5", "more than once"},
		{"ca_bundle=etc/ca.pem", "absolute"},
		{"ca_bundle=/etc/../ca.pem", "absolute"},
		{"use_path_style=maybe", "not a boolean"},
		{"region=us east", "not a region"},
		{"endpoint=ftp://host", "scheme://host"},
		{"endpoint=http://host/path", "scheme://host"},
		{"endpoint=http://u:secret@host", "holds credentials"},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseS3Query(q)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.query, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error with %q", tc.query, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("%q: %v echoes the credentials", tc.query, err)
		}
	}
	got, _ := ParseS3Query(url.Values{"endpoint": {"minio:9000"}, "disable_https": {"true"}, "checksum": {"MD5"}, "use_path_style": {"false"}})
	if got.Endpoint != "http://minio:9000" || got.Checksum != S3ChecksumMD5 || got.PathStyle == nil || *got.PathStyle {
		t.Errorf("parsed %+v", got)
	}
}
