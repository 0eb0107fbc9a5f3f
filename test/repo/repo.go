// Package repo finds the kdefer repository's root for tests and test tools
// that read its manifests (deploy/crd, deploy/webhook, ...).
//
// It looks from the working directory (a test runs in its package's
// directory) rather than at runtime.Caller's file name: make builds
// everything with -trimpath (see the Makefile), and there a file name is a
// module path, not a place on disk.
package repo

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Module is the path kdefer's go.mod declares.
const Module = "github.com/kdefer/kdefer"

// Root returns the nearest directory at or above the working directory whose
// go.mod declares Module (hack/tools has a go.mod of its own, so any go.mod
// will not do).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the kdefer repository: %w", err)
	}
	for {
		if declares(filepath.Join(dir, "go.mod"), Module) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find the kdefer repository: no go.mod declaring %s at or above the working directory; run inside the repository", Module)
		}
		dir = parent
	}
}

// MustRoot is Root for tests and tools that cannot go on without it.
func MustRoot() string {
	root, err := Root()
	if err != nil {
		panic(err)
	}
	return root
}

func declares(gomod, module string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == module
		}
	}
	return false
}
