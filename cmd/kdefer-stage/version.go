package main

import (
	"runtime/debug"

	"github.com/kdefer/kdefer/internal/version"
)

// toolVersion is kdefer's release version (internal/version.Version, stamped into
// images with -ldflags), plus the source revision when the build recorded
// one, e.g. "v0.1.0+3f2a9c1d0e4b" or "v0.1.0+3f2a9c1d0e4b.dirty". The
// manifest names it, so an upload says which uploader wrote it.
func toolVersion() string {
	return versionOf(version.Version, debug.ReadBuildInfo)
}

func versionOf(release string, info func() (*debug.BuildInfo, bool)) string {
	bi, ok := info()
	if !ok {
		return release
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ".dirty"
			}
		}
	}
	if rev == "" {
		return release
	}
	return release + "+" + rev[:min(12, len(rev))] + dirty
}
