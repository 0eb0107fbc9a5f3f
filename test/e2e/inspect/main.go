// Command inspect is the main binary of the e2e stage-in scenario, run
// alone in a FROM-scratch image (no shell, no tools): it records the
// checksums of the inputs kdefer's stage-in downloaded and looks for the
// storage credentials in its environment and in every file it can read
// (they must be only in the stage-in container). It writes
// /kdefer/out/inputs.sha256 and /kdefer/out/findings.txt ("none" when
// clean), then tells the test it is done (GET $KDEFER_E2E_READY).
package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func main() {
	// The credentials to look for, each reversed (so this variable holds none).
	var secrets []string
	for _, r := range strings.Split(os.Getenv("KDEFER_E2E_LOOK_FOR"), ",") {
		b := []byte(r)
		for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
			b[i], b[j] = b[j], b[i]
		}
		secrets = append(secrets, string(b))
	}
	var findings []string
	for _, kv := range os.Environ() {
		name, val, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "AWS_") {
			findings = append(findings, "environment variable "+name)
		}
		for _, s := range secrets {
			if s != "" && strings.Contains(val, s) {
				findings = append(findings, "environment variable "+name+" holds a credential")
			}
		}
	}
	skip := map[string]bool{"/proc": true, "/sys": true, "/dev": true}
	_ = filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && skip[p] {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 16<<20 {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, s := range secrets {
			if s != "" && bytes.Contains(b, []byte(s)) {
				findings = append(findings, "file "+p+" holds a credential")
			}
		}
		return nil
	})
	var sums []string
	entries, err := os.ReadDir("/kdefer/inputs")
	if err != nil {
		fail(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/kdefer/inputs", e.Name()))
		if err != nil {
			fail(err)
		}
		sums = append(sums, fmt.Sprintf("%x  %s", sha256.Sum256(b), e.Name()))
	}
	sort.Strings(sums)
	if len(findings) == 0 {
		findings = []string{"none"}
	}
	if err := os.MkdirAll("/kdefer/out", 0o755); err != nil {
		fail(err)
	}
	write("/kdefer/out/inputs.sha256", strings.Join(sums, "\n")+"\n")
	write("/kdefer/out/findings.txt", strings.Join(findings, "\n")+"\n")
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get(os.Getenv("KDEFER_E2E_READY"))
	if err != nil {
		fail(err)
	}
	resp.Body.Close()
}

func write(p, s string) {
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "inspect:", err)
	os.Exit(1)
}
