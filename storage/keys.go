package storage

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/kdefer/kdefer/stagecontract"
)

// MaxKeyLen is S3's (and GCS's) limit on object key length in bytes.
const MaxKeyLen = 1024

// CheckRel validates a slash-separated relative name, used both for the local
// paths stage-out turns into keys and for the keys stage-in turns into local
// paths. It refuses everything that is not a plain downward path (CheckName)
// and what is not a good object key: backslashes (a path separator
// elsewhere), control characters (they break S3's XML listings and
// terminals), invalid UTF-8 (not a valid object key), and the reserved
// _kdefer/ directory. Refusing is permanent: the fix is to rename the file
// (stage-out) or the object (stage-in); stage-out stores a name that passes
// CheckName but not CheckRel under an encoded key (EncodeName).
func CheckRel(rel string) error {
	if err := CheckName(rel); err != nil {
		return err
	}
	switch {
	case !utf8.ValidString(rel):
		return fmt.Errorf("name %q is not valid UTF-8", rel)
	case strings.ContainsRune(rel, '\\'):
		return fmt.Errorf("name %q contains a backslash", rel)
	case strings.HasPrefix(rel, stagecontract.ReservedDir) || rel == strings.TrimSuffix(stagecontract.ReservedDir, "/"):
		return fmt.Errorf("name %q is in kdefer's reserved directory %s", rel, stagecontract.ReservedDir)
	}
	for _, r := range rel {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("name %q contains a control character", rel)
		}
	}
	return nil
}

// CheckName validates a slash-separated relative name as a local path
// under a directory, whatever bytes it holds: not empty, not absolute, no
// empty, "." or ".." segment, no NUL (no file name holds one), no segment
// longer than 255 bytes (NAME_MAX). It is the tree check both engines share
// for names that never become keys as they are.
func CheckName(rel string) error {
	switch {
	case rel == "":
		return fmt.Errorf("empty name")
	case strings.HasPrefix(rel, "/"):
		return fmt.Errorf("name %q is absolute", rel)
	case strings.IndexByte(rel, 0) >= 0:
		return fmt.Errorf("name %q contains a NUL byte", rel)
	}
	for seg := range strings.SplitSeq(rel, "/") {
		switch seg {
		case "":
			return fmt.Errorf("name %q has an empty path segment", rel)
		case ".", "..":
			return fmt.Errorf("name %q has a %q segment", rel, seg)
		}
		if len(seg) > 255 {
			return fmt.Errorf("name %q has a segment longer than 255 bytes", rel)
		}
	}
	return nil
}

// KeyFor returns the key a file's relative name is stored under: prefix
// (empty or ending in "/") and the name, encoded when the store cannot hold
// it as it is (EncodeName), which is then reported.
func KeyFor(prefix, rel string) (key string, encoded bool, err error) {
	k, encoded, err := EncodeName(rel)
	if err != nil {
		return "", false, Permanentf("rename the file or exclude it with --exclude", "refuse file: %w", err)
	}
	key = prefix + k
	if len(key) > MaxKeyLen {
		return "", false, Permanentf("shorten the prefix or the path", "refuse file %q: key is %d bytes, the limit is %d", rel, len(key), MaxKeyLen)
	}
	return key, encoded, nil
}

// RelFor returns the local relative path for an object key under prefix, or
// a permanent error for keys that would escape the destination.
func RelFor(prefix, key string) (string, error) {
	rel, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", Permanentf("", "refuse key %q: not under prefix %q", key, prefix)
	}
	if err := CheckRel(rel); err != nil {
		return "", Permanentf("remove or rename the object in the bucket", "refuse hostile key: %w", err)
	}
	return rel, nil
}

// CheckTree refuses a set of names (each passed CheckRel) that cannot all be
// files in one directory: "a" and "a/b" both, or a name ending in
// tempSuffix, which the engine writing them uses for partial files.
func CheckTree(rels []string, tempSuffix string) error {
	names := make(map[string]bool, len(rels))
	for _, r := range rels {
		names[r] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		if strings.HasSuffix(n, tempSuffix) {
			return Permanentf("rename the object", "refuse key %q: its name ends in %s, used for partial downloads", n, tempSuffix)
		}
		for dir := path.Dir(n); dir != "."; dir = path.Dir(dir) {
			if names[dir] {
				return Permanentf("rename one of the objects", "refuse keys %q and %q: one would be both a file and a directory", dir, n)
			}
		}
	}
	return nil
}
