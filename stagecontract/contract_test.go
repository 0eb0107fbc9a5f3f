package stagecontract

import (
	"encoding/json"
	"strings"
	"testing"
)

// The controller validates placeholders against URLPlaceholders and
// kdefer-stage expands them through PlaceholderEnv: a placeholder in one and
// not the other would pass validation and fail every stage step.
func TestPlaceholdersHaveVariables(t *testing.T) {
	if len(PlaceholderEnv) != len(URLPlaceholders) {
		t.Errorf("PlaceholderEnv has %d entries, URLPlaceholders %d", len(PlaceholderEnv), len(URLPlaceholders))
	}
	for _, p := range URLPlaceholders {
		if PlaceholderEnv[p] == "" {
			t.Errorf("placeholder {%s} has no environment variable", p)
		}
	}
	for k, env := range IdentityEnv {
		if PlaceholderEnv[k] != env {
			t.Errorf("identity %q reads %s, but placeholder {%s} expands %s", k, env, k, PlaceholderEnv[k])
		}
	}
}

func TestManifestKeyIsReserved(t *testing.T) {
	if got := ManifestKey[:len(ReservedDir)]; got != ReservedDir {
		t.Errorf("ManifestKey %q is not under ReservedDir %q", ManifestKey, ReservedDir)
	}
}

// A log stored whole is encoded as before the field existed, so a manifest
// with no cut log stays readable by a kdefer-stage or kdefer that refuses
// unknown fields; a cut one says how much of it is left out, and where.
func TestLogTruncationEncoding(t *testing.T) {
	whole, err := json.Marshal(ManifestFile{Key: "_kdefer/logs/p/main.log", Size: 3, Checksum: "crc32c:00000000"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(whole), "truncated") {
		t.Errorf("whole log entry %s names truncation", whole)
	}
	var cut ManifestFile
	if err := json.Unmarshal([]byte(`{"key":"k","size":9,"checksum":"crc32c:00000000","mtime":"2026-01-01T00:00:00Z",
		"truncated":{"originalSize":100,"headBytes":2,"tailBytes":6}}`), &cut); err != nil {
		t.Fatal(err)
	}
	if tr := cut.Truncated; tr == nil || tr.OmittedBytes() != 92 || tr.HeadBytes != 2 || tr.TailBytes != 6 {
		t.Errorf("decoded truncation %+v, want 100 bytes with 92 left out", tr)
	}
	if m := LogTruncationMarker(92, 8); m != "\n[kdefer: 92 bytes of this log were left out here; maxBytes=8]\n" {
		t.Errorf("marker %q", m)
	}
}
