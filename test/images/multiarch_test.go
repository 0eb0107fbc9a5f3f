package main

import (
	"archive/tar"
	"debug/elf"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kdefer/kdefer/internal/version"
	"github.com/kdefer/kdefer/test/repo"
)

// small is a Go command built the way kdefer's are (goImage), small enough
// to cross-compile in a unit test: the pause program.
var small = goCmd{name: "small", pkg: "./test/images/pause", user: "65532:65532"}

var twoPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// TestMultiArchIndexReproducible: the same source gives the same index
// digest twice (nothing from the clock or the build directory), one image
// per platform with a binary for that machine, and the OCI annotations on
// the index and on every manifest; pushed, the registry serves that index.
func TestMultiArchIndexReproducible(t *testing.T) {
	root := repo.MustRoot()
	m := meta{version: "v9.9.9-1-gabcdef", revision: "0123456789abcdef", created: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	build := func() built {
		b, ok, err := goImage(root, t.TempDir(), small, twoPlatforms, m)
		if err != nil || !ok {
			t.Fatalf("goImage: ok %v, %v", ok, err)
		}
		return b
	}
	b1, b2 := build(), build()
	d1, err := b1.index().Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d2, _ := b2.index().Digest(); d1 != d2 {
		t.Errorf("two builds of the same source: index digests %s and %s", d1, d2)
	}

	want := map[string]string{
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.version":  "v9.9.9-1-gabcdef",
		"org.opencontainers.image.revision": "0123456789abcdef",
		"org.opencontainers.image.created":  "2026-12-01T12:00:00Z",
	}
	im, err := b1.index().IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	hasAll(t, "index", im.Annotations, want)
	if len(im.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2 (amd64, arm64)", len(im.Manifests))
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for i, d := range im.Manifests {
		p := twoPlatforms[i]
		if d.Platform == nil || d.Platform.OS != p.OS || d.Platform.Architecture != p.Architecture {
			t.Errorf("manifest %d platform %v, want %v", i, d.Platform, p)
		}
		img := b1.images[i].img
		mf, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		hasAll(t, p.String()+" manifest", mf.Annotations, want)
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != p.Architecture || !cf.Created.Time.Equal(m.created) || cf.Config.User != "65532:65532" {
			t.Errorf("%s config: arch %s, created %s, user %q", p, cf.Architecture, cf.Created, cf.Config.User)
		}
		hasAll(t, p.String()+" config labels", cf.Config.Labels, want)
		if got := binaryMachine(t, img, small.name); got != machine[p.Architecture] {
			t.Errorf("%s image holds a binary for %s", p, got)
		}
	}

	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://")
	refDir := t.TempDir()
	if err := pushAll([]built{b1}, reg, refDir, nil); err != nil {
		t.Fatal(err)
	}
	pushed, err := os.ReadFile(filepath.Join(refDir, "small.pushed"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(pushed)), reg+"/small:v9.9.9-1-gabcdef@"+d1.String(); got != want {
		t.Errorf("small.pushed %q, want %q", got, want)
	}
	ref, err := name.ParseReference(reg + "/small:v9.9.9-1-gabcdef")
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d != d1 {
		t.Errorf("the registry serves index %s, pushed %s", d, d1)
	}
}

// binaryMachine is the ELF machine of the file at path in img's layer.
func binaryMachine(t *testing.T, img v1.Image, path string) elf.Machine {
	t.Helper()
	f := filepath.Join(t.TempDir(), "bin")
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := extractFile(rc, path, f); err != nil {
		t.Fatal(err)
	}
	e, err := elf.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	return e.Machine
}

func hasAll(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s=%q, want %q", what, k, got[k], v)
		}
	}
}

// TestBuildMeta: version, revision and time come from the commit (and
// SOURCE_DATE_EPOCH), not from the clock.
func TestBuildMeta(t *testing.T) {
	root := repo.MustRoot()
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git work tree")
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	t.Setenv("SOURCE_DATE_EPOCH", "")
	m, err := buildMeta(root, "")
	if err != nil {
		t.Fatal(err)
	}
	rev := git("rev-parse", "HEAD")
	if strings.TrimSuffix(m.revision, "-dirty") != rev {
		t.Errorf("revision %q, want %s[-dirty]", m.revision, rev)
	}
	// The nearest release tag, or before the first one the release version and the commit.
	want := version.Version + "-g" + rev[:12]
	if out, err := exec.Command("git", "-C", root, "describe", "--tags", "--match", "v[0-9]*", "--abbrev=12").Output(); err == nil {
		want = strings.TrimSpace(string(out))
	}
	if strings.TrimSuffix(m.version, "-dirty") != want || strings.HasSuffix(m.version, "-dirty") != strings.HasSuffix(m.revision, "-dirty") {
		t.Errorf("version %q (revision %q), want %s[-dirty]", m.version, m.revision, want)
	}
	ct, _ := strconv.ParseInt(git("log", "-1", "--format=%ct"), 10, 64)
	if !m.created.Equal(time.Unix(ct, 0)) {
		t.Errorf("created %s, want the commit's time %s", m.created, time.Unix(ct, 0).UTC())
	}

	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if m, err := buildMeta(root, "v1.2.3"); err != nil || m.version != "v1.2.3" || !m.created.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("with --tag v1.2.3 and SOURCE_DATE_EPOCH: %+v, %v", m, err)
	}
	if _, err := buildMeta(root, "latest"); err == nil {
		t.Error("tag latest accepted")
	}
}

// extractFile copies the entry named path of the tar stream r to out.
func extractFile(r io.Reader, path, out string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			return fmt.Errorf("%s in the image: %w", path, err)
		}
		if strings.TrimPrefix(h.Name, "/") != path {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o600)
	}
}
