// Command release makes a kdefer release: `make release REGISTRY=R
// VERSION=vX.Y.Z` runs it, and so does the release workflow
// (.github/workflows/release.yml) on a tag, with REGISTRY=ghcr.io/kdefer.
//
//	go run ./hack/release --registry R --version V [--out bin/release]
//
// In order, each step from what the one before pushed or wrote:
//
//  1. kdefer's two images, multi-arch (--platforms), built by the one image
//     builder (test/images, as `make images`) with V as their tag and
//     version and R stamped in (the controller's default stage image is
//     R/kdefer-stage:V), pushed to R/kdefer-controller:V and R/kdefer-stage:V;
//  2. a CycloneDX SBOM of each platform's binary (its Go modules, read from
//     the build info Go stamps into it), pushed as an OCI 1.1 referrer of
//     that platform's image (sbom.go);
//  3. a cosign signature of each image index (sign.go): with --key (default
//     OUT/cosign.key, made with OUT/cosign.pub on the first run) here, or,
//     with --keyless, by the workflow's `cosign sign` after this command
//     (GitHub's OIDC identity; OUT/images/NAME.pushed names the digests);
//  4. the chart, deploy/helm/kdefer with version V (less the v), appVersion
//     V and its images R/... (chart.go), packaged as OUT/kdefer-VER.tgz and
//     pushed to oci://R/charts/kdefer:VER: `helm install kdefer
//     oci://R/charts/kdefer --version VER` needs no image values;
//  5. OUT/manifests.yaml, `kustomize build deploy` with the same images
//     (manifests.go), for `kubectl apply --server-side -f manifests.yaml`;
//  6. the kubectl plugin's archives and krew manifest (hack/krew) in OUT/krew;
//  7. OUT/release-notes.md, CHANGELOG.md's section of V (notes.go);
//
// and OUT/release.txt lists everything with its digest. Without --version the
// version is the image builder's (git describe): the e2e tier releases every
// tree it tests that way into its own registry. --src DIR releases another
// checkout with this tool (the e2e tier's previous release, a commit that
// may predate hack/release; --notes=false where it has no CHANGELOG.md).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kdefer/kdefer/test/repo"
)

type options struct {
	registry, version, out, platforms string
	key                               string
	keyless, krew, notes              bool
	kustomization                     string
	src                               string
}

func main() {
	var o options
	flag.StringVar(&o.registry, "registry", "", "where to push: HOST[:PORT]/PATH (images R/NAME, chart R/charts/kdefer)")
	flag.StringVar(&o.version, "version", "", "release version vX.Y.Z[-PRE] (default: the image builder's, from git describe)")
	flag.StringVar(&o.out, "out", "bin/release", "directory for the release's files")
	flag.StringVar(&o.platforms, "platforms", "linux/amd64,linux/arm64", "the images' platforms")
	flag.StringVar(&o.key, "key", "", "cosign private key (PEM; COSIGN_PASSWORD if encrypted); default OUT/cosign.key, made when missing")
	flag.BoolVar(&o.keyless, "keyless", false, "sign nothing here: the caller runs cosign sign (keyless, e.g. GitHub's OIDC identity)")
	flag.BoolVar(&o.krew, "krew", true, "build the kubectl plugin's archives and krew manifest")
	// Commits before CHANGELOG.md have no notes to take.
	flag.BoolVar(&o.notes, "notes", true, "write release-notes.md, the version's CHANGELOG.md section")
	flag.StringVar(&o.kustomization, "kustomization", "deploy", "the kustomization manifests.yaml is built from")
	// The e2e tier's upgrade scenario releases an earlier commit (checked
	// out elsewhere) with this tool, which that commit may predate.
	flag.StringVar(&o.src, "src", "", "the source tree to release, a checkout of kdefer (default: this repository)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// semver is a release version as the chart (SemVer 2) and the image tag
// (no "+") both accept: vMAJOR.MINOR.PATCH with an optional pre-release.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func checkVersion(v string) error {
	if !semver.MatchString(v) {
		return fmt.Errorf("--version %q: want vMAJOR.MINOR.PATCH[-PRERELEASE], e.g. v0.2.0 or v0.2.0-rc.1", v)
	}
	return nil
}

func run(o options) error {
	if o.registry == "" || strings.Contains(o.registry, "://") {
		return fmt.Errorf("--registry %q: want HOST[:PORT]/PATH, e.g. ghcr.io/kdefer (no scheme)", o.registry)
	}
	o.registry = strings.TrimSuffix(o.registry, "/")
	if o.version != "" {
		if err := checkVersion(o.version); err != nil {
			return err
		}
	}
	root, err := repo.Root()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(o.out) {
		o.out = filepath.Join(root, o.out)
	}
	if o.src != "" {
		if root, err = filepath.Abs(o.src); err != nil {
			return fmt.Errorf("--src %s: %w", o.src, err)
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var rep report

	imgs, version, err := pushImages(root, o)
	if err != nil {
		return err
	}
	if err := checkVersion(version); err != nil {
		return fmt.Errorf("the images' version: %w (tag a release or pass --version)", err)
	}
	for _, im := range imgs {
		rep.add("image", im.ref.String(), im.digest.String())
		sboms, err := attachSBOMs(im)
		if err != nil {
			return fmt.Errorf("SBOM of %s: %w", im.ref, err)
		}
		for _, s := range sboms {
			rep.add("sbom", s.subject, s.digest)
		}
	}
	if o.keyless {
		fmt.Fprintln(os.Stderr, "release: --keyless: the images are left for cosign sign")
	} else {
		key := o.key
		if key == "" {
			key = filepath.Join(o.out, "cosign.key")
		}
		s, err := loadSigner(key)
		if err != nil {
			return err
		}
		for _, im := range imgs {
			sig, err := s.sign(im.digestRef())
			if err != nil {
				return fmt.Errorf("sign %s: %w", im.ref, err)
			}
			rep.add("signature", sig.tag, sig.digest)
		}
		rep.file(o.out, "cosign.pub")
	}
	ch, err := releaseChart(root, o.out, o.registry, version)
	if err != nil {
		return err
	}
	rep.add("chart", ch.ref, ch.digest)
	rep.file(o.out, filepath.Base(ch.file))
	if err := writeManifests(root, o.kustomization, filepath.Join(o.out, "manifests.yaml"), o.registry, version); err != nil {
		return err
	}
	rep.file(o.out, "manifests.yaml")
	if o.krew {
		files, err := buildKrew(root, o.out, o.registry, version)
		if err != nil {
			return err
		}
		for _, f := range files {
			rep.file(o.out, f)
		}
	}
	if o.notes {
		if err := writeNotes(root, filepath.Join(o.out, "release-notes.md"), version); err != nil {
			return err
		}
		rep.file(o.out, "release-notes.md")
	}
	return rep.write(filepath.Join(o.out, "release.txt"))
}
