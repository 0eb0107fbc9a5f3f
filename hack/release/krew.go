package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildKrew runs hack/krew (make krew) into OUT/krew: the plugin's archives
// and kdefer.yaml, the krew manifest naming them with their SHA-256 at the
// GitHub release's download URL. Its names, relative to out, are returned.
func buildKrew(root, out, reg, v string) ([]string, error) {
	dir := filepath.Join(out, "krew")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	args := []string{"run", "./hack/krew", "--version", v, "--registry", reg, "--out", dir}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	outb, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	var files []string
	for _, l := range strings.Fields(string(outb)) {
		rel, err := filepath.Rel(out, l)
		if err != nil || strings.HasPrefix(rel, "..") {
			rel = filepath.Join("krew", filepath.Base(l))
		}
		files = append(files, rel)
	}
	return files, nil
}
