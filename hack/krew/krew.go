package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"sigs.k8s.io/yaml"
)

// plugin is krew's Plugin manifest (krew.googlecontainertools.github.com/v1alpha2,
// the format krew-index takes), the fields kdefer's uses; written out here
// rather than imported, so that the generator needs no krew module.
type plugin struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   pluginMetadata `json:"metadata"`
	Spec       pluginSpec     `json:"spec"`
}

type pluginMetadata struct {
	Name string `json:"name"`
}

type pluginSpec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description"`
	Platforms        []platform `json:"platforms"`
}

type platform struct {
	Selector selector `json:"selector"`
	URI      string   `json:"uri"`
	SHA256   string   `json:"sha256"`
	Files    []fileOp `json:"files"`
	Bin      string   `json:"bin"`
}

type selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type fileOp struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// binName is the plugin's executable: kubectl runs `kubectl kdefer` as it.
const binName = "kubectl-kdefer"

// archiveFile is one file of a release archive.
type archiveFile struct {
	name string
	mode int64
	data []byte
}

// archive is a release archive (tar.gz) of files, the same bytes for the
// same files: every header has the modification time mtime, owner root
// (0:0, no names), and the gzip header no name and no time.
func archive(files []archiveFile, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)),
			ModTime: mtime.UTC(), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("archive %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("archive %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// release is one platform's archive, named as its URL ends.
type release struct {
	os, arch string
	name     string
	data     []byte
}

// releaseArchive packs the plugin binary built for os/arch with the
// LICENSE (krew-index asks for it in every archive).
func releaseArchive(version, os, arch string, bin, license []byte, mtime time.Time) (release, error) {
	data, err := archive([]archiveFile{{binName, 0o755, bin}, {"LICENSE", 0o644, license}}, mtime)
	if err != nil {
		return release{}, fmt.Errorf("%s/%s: %w", os, arch, err)
	}
	return release{os: os, arch: arch, name: fmt.Sprintf("%s_%s_%s_%s.tar.gz", binName, version, os, arch), data: data}, nil
}

// manifest is the krew manifest of version's archives, each at
// urlBase/NAME with its SHA-256.
func manifest(version, urlBase string, releases []release) ([]byte, error) {
	p := plugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   pluginMetadata{Name: "kdefer"},
		Spec: pluginSpec{
			Version:          version,
			Homepage:         "https://github.com/kdefer/kdefer",
			ShortDescription: "Lint, render and follow kdefer's defer runs of Jobs",
			Description: "kdefer uploads a batch pod's work volume to object storage after its main containers\n" +
				"end for any reason (eviction, OOM kill, drain, deadline), then runs defer steps.\n" +
				"This plugin checks Jobs, pods and DeferPolicies before you submit them (lint),\n" +
				"shows what kdefer changes (render), and follows runs (status, wait, logs, retry).\n",
		},
	}
	for _, r := range releases {
		sum := sha256.Sum256(r.data)
		p.Spec.Platforms = append(p.Spec.Platforms, platform{
			Selector: selector{MatchLabels: map[string]string{"os": r.os, "arch": r.arch}},
			URI:      urlBase + "/" + r.name,
			SHA256:   hex.EncodeToString(sum[:]),
			Files:    []fileOp{{From: binName, To: "."}, {From: "LICENSE", To: "."}},
			Bin:      binName,
		})
	}
	return yaml.Marshal(p)
}
