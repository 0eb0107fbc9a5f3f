//go:build unix

package stagein_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stagein"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// putLinkManifest stores f.txt and a manifest listing it and links.
func putLinkManifest(t *testing.T, links []stagecontract.ManifestLink) (storage.Backend, string) {
	t.Helper()
	be, loc := storagetest.Open(t, storagetest.Mem(t).URL(t))
	data := []byte("input")
	storagetest.Put(t, be, loc.Prefix+"f.txt", data)
	m := &stagecontract.Manifest{Version: stagecontract.ManifestVersion, Tool: "test", Prefix: loc.String(), TotalBytes: int64(len(data)),
		Files: []stagecontract.ManifestFile{{Key: "f.txt", Size: int64(len(data)), Checksum: storage.FormatChecksum(storagetest.CRC(data))}},
		Links: links}
	body, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	storagetest.Put(t, be, loc.Prefix+stagecontract.ManifestKey, body)
	return be, loc.KeyURL(loc.Prefix + stagecontract.ManifestKey)
}

func sym(p, target string) stagecontract.ManifestLink {
	return stagecontract.ManifestLink{Path: p, Kind: stagecontract.LinkSymbolic, Target: target}
}

// A manifest link that would lead out of the destination, alone or through
// the manifest's other links, or that is no link stage-out writes, refuses
// the whole run, naming it, before anything is written.
func TestHostileLinks(t *testing.T) {
	tests := []struct {
		name  string
		links []stagecontract.ManifestLink
		names string // in the error
	}{
		{"Absolute", []stagecontract.ManifestLink{sym("a", "/etc/passwd")}, `"a"`},
		{"UpPastRoot", []stagecontract.ManifestLink{sym("d/a", "../../secret")}, `"d/a"`},
		{"UpThroughDotDot", []stagecontract.ManifestLink{sym("a", "x/../../secret")}, `"a"`},
		{"ThroughAnotherLink", []stagecontract.ManifestLink{sym("a", "sub/b/../secret"), sym("sub/b", "..")}, `"a"`},
		{"Loop", []stagecontract.ManifestLink{sym("x", "y"), sym("y", "x")}, `"x"`},
		{"HostilePath", []stagecontract.ManifestLink{sym("../a", "f.txt")}, `"../a"`},
		{"HardToNoFile", []stagecontract.ManifestLink{{Path: "h", Kind: stagecontract.LinkHard, Target: "../etc/passwd"}}, `"h"`},
		{"UnknownKind", []stagecontract.ManifestLink{{Path: "j", Kind: "junction", Target: "f.txt"}}, `"junction"`},
		{"OverAFile", []stagecontract.ManifestLink{sym("f.txt", "f.txt")}, `"f.txt"`},
		{"Twice", []stagecontract.ManifestLink{sym("a", "f.txt"), sym("a", "f.txt")}, `"a"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			be, u := putLinkManifest(t, tc.links)
			outside := t.TempDir()
			_, err := stagein.Run(context.Background(), inOpts(be, u, filepath.Join(outside, "dst")))
			if err == nil || !strings.Contains(err.Error(), tc.names) || storage.ClassOf(err) != storage.Permanent {
				t.Errorf("stage-in: %v; want a permanent error naming %s", err, tc.names)
			}
			if got := stagetest.ReadTree(t, outside); len(got) != 0 {
				t.Errorf("wrote %v although the manifest is refused", got.Keys())
			}
		})
	}
}

// A symbolic link of the manifest that stays inside by itself but leads out
// through a link the destination already held is removed, and the run
// fails naming it.
func TestLinkOutThroughDestination(t *testing.T) {
	be, u := putLinkManifest(t, []stagecontract.ManifestLink{sym("e", "d/..")})
	dst := t.TempDir()
	mustDo(t, os.Symlink(".", filepath.Join(dst, "d")))
	_, err := stagein.Run(context.Background(), inOpts(be, u, dst))
	if err == nil || !strings.Contains(err.Error(), `symbolic link "e"`) || storage.ClassOf(err) != storage.Permanent {
		t.Errorf("stage-in: %v; want a permanent error naming the link e", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "e")); err == nil {
		t.Errorf("the link e leading out of the destination was left")
	}
}
