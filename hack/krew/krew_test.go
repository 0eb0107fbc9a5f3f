package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The manifest's SHA-256 of each platform is that of the archive built again
// from the same inputs (binary, LICENSE, time): the digests are real and
// the archives reproducible. Each archive holds exactly what the manifest's
// files name, owned by root at the fixed time.
func TestManifestDigestsMatchArchives(t *testing.T) {
	const version, base = "v1.2.3", "https://example.com/releases/v1.2.3"
	license := []byte("Apache License 2.0\n")
	mtime := time.Unix(1700000000, 0)
	bins := map[string][]byte{}
	var releases []release
	for _, p := range [][2]string{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}} {
		bin := []byte("\x7fELF kubectl-kdefer for " + p[0] + "/" + p[1])
		bins[p[0]+"/"+p[1]] = bin
		r, err := releaseArchive(version, p[0], p[1], bin, license, mtime)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	m, err := manifest(version, base, releases)
	if err != nil {
		t.Fatal(err)
	}
	var p plugin
	if err := yaml.UnmarshalStrict(m, &p); err != nil {
		t.Fatalf("manifest:\n%s\n%v", m, err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "kdefer" || p.Spec.Version != version {
		t.Errorf("manifest head: %+v", p)
	}
	if len(p.Spec.Platforms) != len(bins) {
		t.Fatalf("%d platforms, want %d", len(p.Spec.Platforms), len(bins))
	}
	hexSum := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for _, pl := range p.Spec.Platforms {
		os, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		again, err := releaseArchive(version, os, arch, bins[os+"/"+arch], license, mtime)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(again.data)
		if !hexSum.MatchString(pl.SHA256) || pl.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s/%s: manifest sha256 %s, the archive built again has %x", os, arch, pl.SHA256, sum)
		}
		if want := base + "/kubectl-kdefer_v1.2.3_" + os + "_" + arch + ".tar.gz"; pl.URI != want || !strings.HasSuffix(pl.URI, "/"+again.name) {
			t.Errorf("%s/%s: uri %s, want %s", os, arch, pl.URI, want)
		}
		if pl.Bin != binName {
			t.Errorf("%s/%s: bin %q", os, arch, pl.Bin)
		}
		got := untar(t, again.data)
		want := map[string]string{binName: string(bins[os+"/"+arch]), "LICENSE": string(license)}
		for _, f := range pl.Files {
			if _, ok := got[f.From]; !ok || f.To != "." {
				t.Errorf("%s/%s: files entry %+v not in the archive %v", os, arch, f, keys(got))
			}
		}
		for name, data := range want {
			if got[name] != data {
				t.Errorf("%s/%s: %s in the archive is %q, want %q", os, arch, name, got[name], data)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s/%s: archive holds %v", os, arch, keys(got))
		}
	}
}

// untar returns the archive's files after checking each header is the
// same whoever builds it: the fixed time, root without names, no gzip name
// or time.
func untar(t *testing.T, data []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if gz.Name != "" || !gz.ModTime.IsZero() {
		t.Errorf("gzip header: name %q time %v, want neither", gz.Name, gz.ModTime)
	}
	out := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("%s: owner %d:%d (%q:%q), time %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		if want := map[string]int64{binName: 0o755, "LICENSE": 0o644}[h.Name]; h.Mode != want {
			t.Errorf("%s: mode %o, want %o", h.Name, h.Mode, want)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = string(b)
	}
	return out
}

func keys(m map[string]string) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}
