package storage

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kdefer/kdefer/stagecontract"
)

// Names the store cannot hold are stored under an encoded key that decodes
// to the name, stays a valid key, and cannot be a real name's key.
func TestEncodeName(t *testing.T) {
	tests := []struct{ name, key string }{
		{"plain/a.txt", "plain/a.txt"},
		{"new\nline.txt", EncodedDir + "new%0Aline.txt"},
		{"bad\xff/x.dat", EncodedDir + "bad%FF/x.dat"},
		{"back\\slash", EncodedDir + "back%5Cslash"},
		{"100%\tdone", EncodedDir + "100%25%09done"},
		{"_kdefer/manifest.json", EncodedDir + "_kdefer/manifest.json"},
		{"_kdefer/names/x%41", EncodedDir + "_kdefer/names/x%2541"},
		{"é\x7f", EncodedDir + "é%7F"},
	}
	for _, tc := range tests {
		key, encoded, err := EncodeName(tc.name)
		if err != nil || key != tc.key || encoded != (key != tc.name) {
			t.Errorf("EncodeName(%q) = %q, %v, %v; want %q", tc.name, key, encoded, err, tc.key)
			continue
		}
		if !encoded {
			continue
		}
		if err := CheckRel(strings.TrimPrefix(key, stagecontract.ReservedDir)); err != nil {
			t.Errorf("EncodeName(%q) = %q, not a valid key: %v", tc.name, key, err)
		}
		if back, err := DecodeName(key); err != nil || back != tc.name {
			t.Errorf("DecodeName(%q) = %q, %v; want %q", key, back, err, tc.name)
		}
	}
	for _, name := range []string{"", "/abs\n", "a/../\n", "a//\n", "nul\x00"} {
		if key, _, err := EncodeName(name); err == nil {
			t.Errorf("EncodeName(%q) = %q, want an error: it is no path inside a tree", name, key)
		}
	}
	for _, key := range []string{"plain", EncodedDir + "plain", EncodedDir + "a%2", EncodedDir + "a%0a", EncodedDir + "a%41", EncodedDir + "../%0A", EncodedDir + "a//%0A", EncodedDir} {
		if name, err := DecodeName(key); err == nil {
			t.Errorf("DecodeName(%q) = %q, want an error", key, name)
		}
	}
}

// A manifest may list an encoded key only with the name it encodes, and
// only a name inside the tree.
func TestParseManifestEncoded(t *testing.T) {
	const head = `{"version":1,"tool":"t","prefix":"mem://b/","start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:00:00Z","totalBytes":0,"files":[`
	file := func(key, path string) string {
		return `{"key":"` + key + `","path":"` + path + `","size":0,"checksum":"crc32c:00000000","mtime":"2026-01-01T00:00:00Z"}`
	}
	ok := head + file(EncodedDir+"new%0Aline", `new\nline`) + "," + file(EncodedDir+"bad%FF", `\"bad\\xff\"`) + `]}`
	m, err := ParseManifest([]byte(ok))
	if err != nil {
		t.Fatalf("ParseManifest: %v", err)
	}
	if got := []string{NameOf(m.Files[0]), NameOf(m.Files[1])}; got[0] != "new\nline" || got[1] != "bad\xff" {
		t.Errorf("NameOf = %q", got)
	}
	for _, bad := range []string{
		head + file(EncodedDir+"new%0Aline", `other\nname`) + `]}`,
		head + file(EncodedDir+"../%0A", `../\n`) + `]}`,
		head + file("new\\nline", `new\nline`) + `]}`,
		head + file(EncodedDir+"plain", `plain`) + `]}`,
	} {
		if _, err := ParseManifest([]byte(bad)); err == nil {
			t.Errorf("ParseManifest accepted %s", bad)
		}
	}
}

// FuzzEncodeName: every name inside a tree gets exactly one key, which is a
// valid key and decodes back to the name.
func FuzzEncodeName(f *testing.F) {
	for _, s := range []string{"a/b", "new\nline", "bad\xff", "_kdefer/x", "%41", "a\\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		key, encoded, err := EncodeName(name)
		if err != nil {
			if CheckName(name) == nil {
				t.Fatalf("EncodeName(%q) refused a name inside the tree: %v", name, err)
			}
			return
		}
		if !encoded {
			if key != name || CheckRel(key) != nil {
				t.Fatalf("EncodeName(%q) = %q unencoded", name, key)
			}
			return
		}
		// A valid key but for segment lengths (escapes lengthen them;
		// the store does not limit segments, only the local tree does).
		if !utf8.ValidString(key) || strings.ContainsAny(key, "\\\x7f") || strings.IndexFunc(key, func(r rune) bool { return r < 0x20 }) >= 0 {
			t.Fatalf("EncodeName(%q) = %q, not a valid key", name, key)
		}
		if back, err := DecodeName(key); err != nil || back != name {
			t.Fatalf("DecodeName(EncodeName(%q)) = %q, %v", name, back, err)
		}
	})
}
