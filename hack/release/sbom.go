package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SBOMMediaType is the SBOMs' artifact type (their manifest's config media
// type, which the referrers API reports as artifactType): CycloneDX JSON.
const SBOMMediaType = types.MediaType("application/vnd.cyclonedx+json")

// attached is an SBOM pushed as a referrer of subject.
type attached struct{ subject, digest string }

// attachSBOMs pushes, for each platform image of the index p, a CycloneDX
// SBOM of its binary as an OCI 1.1 referrer of that image (a manifest whose
// subject is the image): the registry's referrers API lists it (`oras
// discover`, `regctl artifact list`), and go-containerregistry keeps the
// referrers tag (sha256-HEX) of a registry without that API.
func attachSBOMs(p pushed) ([]attached, error) {
	opts := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	idx, err := remote.Index(p.digestRef(), opts...)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []attached
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, err
		}
		bin, err := fileOf(img, p.name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", desc.Platform, err)
		}
		bi, err := buildinfo.Read(bytes.NewReader(bin))
		if err != nil {
			return nil, fmt.Errorf("%s: the build info of /%s: %w", desc.Platform, p.name, err)
		}
		doc, err := sbom(p.name, p.ref.TagStr(), bi, created(img))
		if err != nil {
			return nil, err
		}
		art, err := sbomArtifact(doc, desc)
		if err != nil {
			return nil, err
		}
		d, err := art.Digest()
		if err != nil {
			return nil, err
		}
		ref := p.ref.Context().Digest(d.String())
		if err := remote.Write(ref, art, opts...); err != nil {
			return nil, fmt.Errorf("push the SBOM of %s: %w", desc.Digest, err)
		}
		out = append(out, attached{subject: p.ref.Context().Digest(desc.Digest.String()).String() + " (" + desc.Platform.String() + ")", digest: d.String()})
	}
	return out, nil
}

// sbomArtifact is doc as an OCI artifact referring to the image subject.
func sbomArtifact(doc []byte, subject v1.Descriptor) (v1.Image, error) {
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer(doc, SBOMMediaType), MediaType: SBOMMediaType})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), SBOMMediaType)
	s := v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest}
	return mutate.Subject(img, s).(v1.Image), nil
}

// created is the image's creation time (the commit's: reproducible), the SBOM's timestamp.
func created(img v1.Image) time.Time {
	if cf, err := img.ConfigFile(); err == nil {
		return cf.Created.UTC()
	}
	return time.Unix(0, 0).UTC()
}

// fileOf is the file /path of img's (one-layer-per-file-set) layers.
func fileOf(img v1.Image, path string) ([]byte, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rc.Close()
				return nil, err
			}
			if strings.TrimPrefix(h.Name, "/") == path {
				data, err := io.ReadAll(tr)
				rc.Close()
				return data, err
			}
		}
		rc.Close()
	}
	return nil, fmt.Errorf("no /%s in the image", path)
}

// sbom is the CycloneDX JSON SBOM of a Go binary: the binary as the
// application, its main module and every module linked in as libraries
// (package URLs pkg:golang/PATH@VERSION, with Go's module hash), the Go
// toolchain and the build settings as properties.
func sbom(name, version string, bi *debug.BuildInfo, when time.Time) ([]byte, error) {
	bom := cdx.NewBOM()
	bom.SerialNumber = ""
	app := cdx.Component{
		BOMRef: "pkg:golang/" + bi.Main.Path + "@" + version, Type: cdx.ComponentTypeApplication,
		Name: name, Version: version, PackageURL: "pkg:golang/" + bi.Main.Path + "@" + version,
	}
	props := []cdx.Property{{Name: "go:toolchain", Value: bi.GoVersion}, {Name: "go:package", Value: bi.Path}}
	for _, s := range bi.Settings {
		props = append(props, cdx.Property{Name: "go:build:" + s.Key, Value: s.Value})
	}
	app.Properties = &props
	bom.Metadata = &cdx.Metadata{Timestamp: when.Format(time.RFC3339), Component: &app}
	var comps []cdx.Component
	var refs []string
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		purl := "pkg:golang/" + m.Path + "@" + m.Version
		c := cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version, PackageURL: purl}
		if m.Sum != "" {
			c.Properties = &[]cdx.Property{{Name: "go:module:sum", Value: m.Sum}}
		}
		comps = append(comps, c)
		refs = append(refs, purl)
	}
	bom.Components = &comps
	bom.Dependencies = &[]cdx.Dependency{{Ref: app.BOMRef, Dependencies: &refs}}
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		return nil, fmt.Errorf("encode the SBOM: %w", err)
	}
	return buf.Bytes(), nil
}
