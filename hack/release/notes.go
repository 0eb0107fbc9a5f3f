package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// linkDef is a Markdown link definition line, as a changelog ends with.
var linkDef = regexp.MustCompile(`^\[[^\]]+\]: `)

// writeNotes writes CHANGELOG.md's section of version v (Keep a Changelog:
// "## [X.Y.Z] - DATE"): the release's notes. A pre-release (v0.2.0-rc.1)
// takes its release's section, else Unreleased; a release without a
// section of its own is an error (write the CHANGELOG first).
func writeNotes(root, out, v string) error {
	data, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	base, pre, _ := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	body, ok := section(data, base)
	if !ok && pre != "" {
		body, ok = section(data, "Unreleased")
	}
	if !ok {
		return fmt.Errorf("CHANGELOG.md has no section \"## [%s]\" for %s: add it before releasing", base, v)
	}
	return os.WriteFile(out, []byte(body), 0o644)
}

// section is the text under the heading "## [name]" up to the next "## ".
func section(changelog []byte, name string) (string, bool) {
	var b strings.Builder
	in, found := false, false
	sc := bufio.NewScanner(bytes.NewReader(changelog))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "## ") {
			in = strings.HasPrefix(l, "## ["+name+"]")
			found = found || in
			continue
		}
		if in && !linkDef.MatchString(l) { // "[0.2.0]: URL" at the end
			b.WriteString(l + "\n")
		}
	}
	return strings.TrimSpace(b.String()) + "\n", found
}
