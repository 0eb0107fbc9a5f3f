// Command krew builds kdefer's kubectl plugin release archives, one tar.gz
// of kubectl-kdefer and LICENSE per platform, and the krew manifest that
// names them with their SHA-256 (for a release: upload the archives, submit
// the manifest to krew-index). The archives are reproducible: the binaries
// are built with -trimpath and the version stamped, and the archives'
// headers carry fixed times and owners, so the same commit and Go version
// give the same bytes and the manifest's digests.
//
//	go run ./hack/krew --version v0.2.0            # bin/krew/*.tar.gz, bin/krew/kdefer.yaml
//	make krew VERSION=v0.2.0
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	version := flag.String("version", "", "release version (vX.Y.Z): stamped into the binaries, names the archives")
	urlBase := flag.String("url", "", "where the archives are downloaded from (default https://github.com/kdefer/kdefer/releases/download/VERSION)")
	out := flag.String("out", "bin/krew", "directory for the archives and kdefer.yaml")
	registry := flag.String("registry", "", "where the release's images are (stamped: the CLI's default stage image); default internal/version's")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "OS/ARCH list")
	flag.Parse()
	if err := run(*version, *registry, *urlBase, *out, *platforms); err != nil {
		fmt.Fprintln(os.Stderr, "krew:", err)
		os.Exit(1)
	}
}

func run(version, registry, urlBase, out, platforms string) error {
	if !strings.HasPrefix(version, "v") {
		return fmt.Errorf("--version %q: want a release version vX.Y.Z (krew needs one)", version)
	}
	if urlBase == "" {
		urlBase = "https://github.com/kdefer/kdefer/releases/download/" + version
	}
	license, err := os.ReadFile("LICENSE")
	if err != nil {
		return fmt.Errorf("run from the module root: %w", err)
	}
	mtime, err := sourceDate()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "kdefer-krew-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var releases []release
	for _, p := range strings.Split(platforms, ",") {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok {
			return fmt.Errorf("--platforms: %q is not OS/ARCH", p)
		}
		bin, err := build(tmp, version, registry, goos, goarch)
		if err != nil {
			return err
		}
		r, err := releaseArchive(version, goos, goarch, bin, license, mtime)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, r.name), r.data, 0o644); err != nil {
			return err
		}
		fmt.Println(filepath.Join(out, r.name))
		releases = append(releases, r)
	}
	m, err := manifest(version, urlBase, releases)
	if err != nil {
		return err
	}
	path := filepath.Join(out, "kdefer.yaml")
	fmt.Println(path)
	return os.WriteFile(path, m, 0o644)
}

// build cross-compiles the kdefer CLI for goos/goarch as the images'
// binaries are built: static, stripped, -trimpath, the version stamped.
func build(tmp, version, registry, goos, goarch string) ([]byte, error) {
	out := filepath.Join(tmp, binName+"-"+goos+"-"+goarch)
	ld := "-s -w -X github.com/kdefer/kdefer/internal/version.Version=" + version
	if registry != "" {
		ld += " -X github.com/kdefer/kdefer/internal/version.Registry=" + registry
	}
	cmd := exec.Command("go", "build", "-trimpath", "-gcflags=all=-dwarf=false", "-ldflags", ld, "-o", out, "./cmd/kdefer")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/kdefer for %s/%s: %w", goos, goarch, err)
	}
	return os.ReadFile(out)
}

// sourceDate is the archives' file time: SOURCE_DATE_EPOCH (the
// reproducible-builds convention) when set, else the Unix epoch.
func sourceDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}
