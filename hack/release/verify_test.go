package main

import (
	"archive/tar"
	"bytes"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// verifyCosign checks ref as `cosign verify --key cosign.pub
// --insecure-ignore-tlog` does, written from cosign's documented signature
// format rather than from sign.go: resolve the tag to a digest, fetch
// REPO:sha256-HEX.sig, and accept if one of its simple-signing layers has
// a signature that verifies over the layer's bytes with the public key
// (sigstore's verifier, cosign's own) and a payload whose
// critical.image.docker-manifest-digest is that digest and whose
// critical.identity.docker-reference is the repository.
func verifyCosign(ref name.Tag, pubPEM []byte) error {
	desc, err := remote.Head(ref)
	if err != nil {
		return err
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pubPEM)
	if err != nil {
		return err
	}
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return err
	}
	sigTag := ref.Context().Tag("sha256-" + desc.Digest.Hex + ".sig")
	img, err := remote.Image(sigTag)
	if err != nil {
		return fmt.Errorf("no signature of %s: %w", desc.Digest, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	last := fmt.Errorf("%s has no simple-signing layer", sigTag)
	for _, l := range m.Layers {
		if l.MediaType != "application/vnd.dev.cosign.simplesigning.v1+json" {
			continue
		}
		layer, err := img.LayerByDigest(l.Digest)
		if err != nil {
			return err
		}
		rc, err := layer.Compressed()
		if err != nil {
			return err
		}
		body, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		sig, err := base64.StdEncoding.DecodeString(l.Annotations["dev.cosignproject.cosign/signature"])
		if err != nil {
			return err
		}
		if err := v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(body)); err != nil {
			last = fmt.Errorf("signature: %w", err)
			continue
		}
		var p struct {
			Critical struct {
				Identity struct {
					DockerReference string `json:"docker-reference"`
				} `json:"identity"`
				Image struct {
					DockerManifestDigest string `json:"docker-manifest-digest"`
				} `json:"image"`
				Type string `json:"type"`
			} `json:"critical"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return err
		}
		switch {
		case p.Critical.Type != "cosign container image signature":
			last = fmt.Errorf("payload type %q", p.Critical.Type)
		case p.Critical.Image.DockerManifestDigest != desc.Digest.String():
			last = fmt.Errorf("payload names digest %s, the image is %s", p.Critical.Image.DockerManifestDigest, desc.Digest)
		case p.Critical.Identity.DockerReference != ref.Context().Name():
			last = fmt.Errorf("payload names %s, the image is %s", p.Critical.Identity.DockerReference, ref.Context().Name())
		default:
			return nil
		}
	}
	return last
}

// decodeSBOM reads the CycloneDX JSON SBOM of an SBOM artifact.
func decodeSBOM(t *testing.T, art v1.Image) *cdx.BOM {
	t.Helper()
	layers, err := art.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("SBOM artifact: %d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(rc, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	if bom.Components == nil {
		t.Fatal("SBOM without components")
	}
	return &bom
}

// writeTar writes a tar of one executable file.
func writeTar(w io.Writer, name string, data []byte) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	return tw.Close()
}
