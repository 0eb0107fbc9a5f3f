package main

import (
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testRegistry is go-containerregistry's registry (test/registry's) with
// the referrers API, on a loopback port: spoken to over plain HTTP.
func testRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushIndex pushes idx as REF and returns it as pushed.
func pushIndex(t *testing.T, ref string, idx v1.ImageIndex) pushed {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, idx); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return pushed{name: tag.RepositoryStr()[strings.LastIndex(tag.RepositoryStr(), "/")+1:], ref: tag, digest: d}
}

// binaryImage is a one-layer image holding this test's own binary at
// /NAME (a Go binary with build info, as the release's images hold).
func binaryImage(t *testing.T, name string) v1.Image {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeTar(&buf, name, data); err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	return mutate.MediaType(img, types.OCIManifestSchema1)
}

func TestCheckVersion(t *testing.T) {
	for _, v := range []string{"v0.2.0", "v0.2.0-rc.1", "v1.10.3", "v0.2.0-3-g1a2b3c4d5e6f-dirty"} {
		if err := checkVersion(v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	for _, v := range []string{"0.2.0", "v0.2", "v0.2.0+meta", "latest", "v01.2.3", ""} {
		if err := checkVersion(v); err == nil {
			t.Errorf("%s: accepted", v)
		}
	}
}

func TestNotesSection(t *testing.T) {
	root := t.TempDir()
	cl := "# Changelog\n\n## [Unreleased]\n\n- next\n\n## [0.2.0] - 2026-12-05\n\n### Added\n- [a link](x) first\n\n## [0.1.0]\n\n- old\n\n[0.2.0]: https://example/v0.2.0\n"
	if err := os.WriteFile(filepath.Join(root, "CHANGELOG.md"), []byte(cl), 0o644); err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]string{
		"v0.2.0":      "### Added\n- [a link](x) first\n",
		"v0.2.0-rc.1": "### Added\n- [a link](x) first\n",
		"v0.3.0-rc.1": "- next\n",
		"v0.1.0":      "- old\n",
	} {
		out := filepath.Join(root, v+".md")
		if err := writeNotes(root, out, v); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if got, _ := os.ReadFile(out); string(got) != want {
			t.Errorf("%s: notes %q, want %q", v, got, want)
		}
	}
	if err := writeNotes(root, filepath.Join(root, "x.md"), "v0.3.0"); err == nil || !strings.Contains(err.Error(), `"## [0.3.0]"`) {
		t.Errorf("v0.3.0 without a section: %v, want an error naming the section", err)
	}
}

// TestSBOMRefersToImage: every platform image of an index gets a CycloneDX
// SBOM of its binary's modules that the referrers API lists for it.
func TestSBOMRefersToImage(t *testing.T) {
	reg := testRegistry(t)
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: binaryImage(t, "kdefer-stage"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	p := pushIndex(t, reg+"/kdefer/kdefer-stage:v0.2.0", idx)
	got, err := attachSBOMs(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d SBOMs, want 1", len(got))
	}
	im, _ := idx.IndexManifest()
	refs, err := remote.Referrers(p.ref.Context().Digest(im.Manifests[0].Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	rm, _ := refs.IndexManifest()
	if len(rm.Manifests) != 1 || rm.Manifests[0].ArtifactType != string(SBOMMediaType) {
		t.Fatalf("referrers of the image: %+v, want one %s", rm.Manifests, SBOMMediaType)
	}
	art, err := remote.Image(p.ref.Context().Digest(rm.Manifests[0].Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	doc := decodeSBOM(t, art)
	if doc.Metadata == nil || doc.Metadata.Component == nil || doc.Metadata.Component.Name != "kdefer-stage" || doc.Metadata.Component.Version != "v0.2.0" {
		t.Errorf("SBOM metadata %+v, want the component kdefer-stage v0.2.0", doc.Metadata)
	}
	found := false
	for _, c := range *doc.Components {
		found = found || c.Name == "github.com/google/go-containerregistry" && strings.HasPrefix(c.PackageURL, "pkg:golang/github.com/google/go-containerregistry@v")
	}
	if !found {
		t.Errorf("SBOM of %d components lacks the module go-containerregistry, which the binary links", len(*doc.Components))
	}
}

// TestSignatureVerifies: a signed image verifies with the release's
// cosign.pub by cosign's rules (verifyCosign, written from cosign's format,
// not from sign.go); the same tag pointing at other content, a copied
// signature or another key's signature do not.
func TestSignatureVerifies(t *testing.T) {
	reg := testRegistry(t)
	dir := t.TempDir()
	s, err := loadSigner(filepath.Join(dir, "cosign.key"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(filepath.Join(dir, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := random.Index(256, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	p := pushIndex(t, reg+"/kdefer/kdefer-controller:v0.2.0", idx)
	if err := verifyCosign(p.ref, pub); err == nil {
		t.Fatal("an unsigned image verified")
	}
	sig, err := s.sign(p.digestRef())
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyCosign(p.ref, pub); err != nil {
		t.Fatalf("the signed image: %v", err)
	}

	// Tampered: the tag now names other content; its digest has no signature.
	other, _ := random.Index(256, 1, 2)
	q := pushIndex(t, p.ref.String(), other)
	if err := verifyCosign(q.ref, pub); err == nil {
		t.Error("a replaced image verified")
	}
	// ...nor does the original's signature copied to it.
	sigImg, err := remote.Image(p.ref.Context().Digest(sig.digest))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(signatureTag(q.digestRef()), sigImg); err != nil {
		t.Fatal(err)
	}
	if err := verifyCosign(q.ref, pub); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("a replaced image with the original's signature: %v, want a digest mismatch", err)
	}
	// Another key's signature of the original does not verify with this key.
	other2, err := loadSigner(filepath.Join(t.TempDir(), "cosign.key"))
	if err != nil {
		t.Fatal(err)
	}
	p2 := pushIndex(t, reg+"/kdefer/kdefer-stage:v0.2.0", idx)
	if _, err := other2.sign(p2.digestRef()); err != nil {
		t.Fatal(err)
	}
	if err := verifyCosign(p2.ref, pub); err == nil {
		t.Error("another key's signature verified")
	}
}
