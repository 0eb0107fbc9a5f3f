package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/kdefer/kdefer/internal/version"
)

// Source is what org.opencontainers.image.source names.
const Source = "https://github.com/kdefer/kdefer"

// meta says which source an image of kdefer's was built from. Every field
// comes from the source (the commit), never from the clock or the machine,
// so that the same commit gives the same image digests anywhere.
type meta struct {
	// version is the images' tag and the binaries' internal/version.Version.
	version string
	// registry is where the images go (the --push target, or LocalRepo for
	// tarballs): the binaries' internal/version.Registry, so that the
	// controller's default stage image is the one built beside it.
	registry string
	// revision is the commit ("" when unknown), with "-dirty" for a work
	// tree with uncommitted changes.
	revision string
	// created is SOURCE_DATE_EPOCH, else the commit's time: the images'
	// creation time and every file's modification time.
	created time.Time
}

// annotations are the OCI annotations (and config labels) of kdefer's images.
func (m meta) annotations() map[string]string {
	a := map[string]string{
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.version":  m.version,
		"org.opencontainers.image.created":  m.created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	if m.revision != "" {
		a["org.opencontainers.image.revision"] = m.revision
	}
	return a
}

// buildMeta reads the build's version, revision and time from the work
// tree's git repository (`git describe`, the commit and its time), or, for
// a build from the module cache (`go run .../test/images@vX.Y.Z`: no
// repository), from the version and VCS settings Go stamped into this
// builder. tag overrides the version when not empty.
func buildMeta(root, tag string) (meta, error) {
	m, err := gitMeta(root)
	if err != nil {
		m = moduleMeta()
	}
	if tag != "" {
		m.version = tag
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return meta{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970: %w", s, err)
		}
		m.created = time.Unix(sec, 0).UTC()
	}
	if m.version == "" || m.version == "latest" {
		return meta{}, fmt.Errorf("image tag %q: want a fixed version (set --tag)", m.version)
	}
	return m, nil
}

// gitMeta: the version is `git describe --tags --dirty` of the nearest
// vX.Y.Z tag (v0.2.0, or v0.2.0-3-g1a2b3c4d5e6f after it); with no tag yet,
// internal/version.Version with the commit (v0.1.0-g1a2b3c4d5e6f).
func gitMeta(root string) (meta, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	rev, err := git("rev-parse", "HEAD")
	if err != nil {
		return meta{}, err
	}
	ct, err := git("log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		return meta{}, err
	}
	sec, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return meta{}, fmt.Errorf("commit time %q: %w", ct, err)
	}
	status, err := git("status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return meta{}, err
	}
	dirty := ""
	if status != "" {
		dirty = "-dirty"
	}
	v, err := git("describe", "--tags", "--match", "v[0-9]*", "--abbrev=12")
	if err != nil { // no release tag yet
		v = version.Version + "-g" + rev[:12]
	}
	return meta{version: v + dirty, revision: rev + dirty, created: time.Unix(sec, 0).UTC()}, nil
}

// moduleMeta is what Go stamped into this builder: its module's version
// under `go run ...@version`, and the VCS settings when it has them.
func moduleMeta() meta {
	m := meta{version: version.Version, created: time.Unix(0, 0).UTC()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return m
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" && !strings.Contains(v, "+") {
		m.version = v
	}
	dirty := ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			m.revision = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				m.created = t.UTC()
			}
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if m.revision != "" {
		m.revision += dirty
	}
	return m
}
