package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// report is OUT/release.txt: one line per thing released, its kind, where
// it is and its digest (a registry's for what was pushed, the SHA-256 of a
// file's bytes for the files to upload).
type report struct{ lines []string }

func (r *report) add(kind, where, digest string) {
	r.lines = append(r.lines, fmt.Sprintf("%-9s %s %s", kind, where, digest))
}

// file adds dir/name by its SHA-256; a file that cannot be read is a line
// that says so, and write fails.
func (r *report) file(dir, name string) {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		r.add("file", name, "MISSING: "+err.Error())
		return
	}
	sum := sha256.Sum256(data)
	r.add("file", name, "sha256:"+hex.EncodeToString(sum[:]))
}

func (r *report) write(path string) error {
	text := strings.Join(r.lines, "\n") + "\n"
	fmt.Print(text)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return err
	}
	if strings.Contains(text, "MISSING: ") {
		return fmt.Errorf("files missing from the release (see %s)", path)
	}
	return nil
}
