// Command images is kdefer's one image builder, without a Docker engine:
// kdefer's images, reproducible and multi-arch, pushed to a registry, and
// the images of the local test cluster as docker-archive tarballs that
// `ctr -n k8s.io images import` (test/cluster/cluster.sh load-images) accepts:
//
//	go run ./test/images --out bin/images                 # tarballs + NAME.ref files
//	go run ./test/images --out bin/images --only pause,busybox
//	go run ./test/images --push HOST:PORT[/PATH] --platforms linux/amd64,linux/arm64
//	go run ./test/images --push HOST:PORT --only busybox,pause --push-as busybox=HOST:PORT/e2e-test-images/busybox:1.37.0-2
//
// Images (local names; tags are never "latest"):
//
//	kdefer.io/pause:1.0                  the sandbox image (test/images/pause)
//	kdefer.io/busybox:VERSION            Debian's busybox-static with its applet links
//	kdefer.io/kdefer-stage:TAG           ./cmd/kdefer-stage
//	kdefer.io/kdefer-controller:TAG      ./cmd/kdefer-controller, as 65532
//	kdefer.io/NAME:TAG                   --manager NAME:TAG=BIN: another project's manager, prebuilt
//	                                     (test/tools/install.sh kueue, jobset), e.g. kueue:v0.17.0
//
// kdefer.io and the names come from api/v1alpha1 (ImageRepository,
// StageImageName, ControllerImageName). A tarball's TAG is version.Version,
// the name the local overlay uses; the binaries' internal/version.Registry
// is kdefer.io then, the --push target otherwise, so that the controller's
// default stage image (v1alpha1.DefaultStageImage()) is its sibling. A pushed
// image's TAG is the build's version (git describe of the nearest vX.Y.Z
// tag, or version.Version and the commit before the first tag; the module's
// version under `go run ...@version`), stamped into its binaries as
// internal/version.Version; --tag overrides both.
//
// --push writes one OCI image index per image, with an image per platform
// (each binary cross-compiled with CGO_ENABLED=0), and the OCI annotations
// source, revision, version and created on the index and every manifest.
// Nothing in an image comes from the clock: file times and the creation
// time are SOURCE_DATE_EPOCH, else the commit's time, so the same commit
// gives the same digests (with the same Go toolchain and CA bundle).
//
// --push-as NAME=REF (repeatable) pushes the local cluster's image NAME
// (pause, busybox) as REF too, a whole reference: for another test suite that
// pulls images by its own names and tags (Kubernetes' e2e specs, whose
// image list test/e2e/upstream points at the test registry).
//
// --ref-dir DIR writes DIR/NAME.pushed (REGISTRY/NAME:TAG@DIGEST) for each
// pushed image, for scripts that install what was pushed.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/internal/version"
	"github.com/kdefer/kdefer/test/repo"
)

// LocalRepo prefixes every image built for the local cluster.
const LocalRepo = v1alpha1.ImageRepository

// PauseTag is the pause image's tag; bump it when test/images/pause changes meaningfully.
const PauseTag = "1.0"

const (
	stageImageName      = v1alpha1.StageImageName
	controllerImageName = v1alpha1.ControllerImageName
)

func main() {
	out := flag.String("out", "bin/images", "directory for NAME.tar and NAME.ref")
	push := flag.String("push", "", "registry (HOST:PORT[/PATH]) to push kdefer's images to instead of writing tarballs")
	platforms := flag.String("platforms", "", "comma-separated OS/ARCH of the pushed images (default: this machine's)")
	refDir := flag.String("ref-dir", "", "with --push: write NAME.pushed (REF@DIGEST) for each image here")
	tag := flag.String("tag", os.Getenv("KDEFER_IMAGE_TAG"), "tag of kdefer's images, and their version (not \"latest\")")
	busybox := flag.String("busybox", "/bin/busybox", "static busybox binary (Debian's busybox-static)")
	only := flag.String("only", "", "comma-separated images to build (default: all)")
	var managers []managerBin
	pushAs := map[string][]string{}
	flag.Func("push-as", "NAME=REF: with --push, push the local image NAME (pause, busybox) as REF (HOST:PORT/PATH:TAG) too; repeatable", func(v string) error {
		n, ref, err := parsePushAs(v)
		pushAs[n] = append(pushAs[n], ref)
		return err
	})
	flag.Func("manager", "NAME:TAG=BIN: an image NAME:TAG of another project's prebuilt manager BIN (test/tools/install.sh kueue, jobset; TAG its version); repeatable", func(v string) error {
		m, err := parseManager(v)
		managers = append(managers, m)
		return err
	})
	flag.Parse()
	want := func(n string) bool { return *only == "" || strings.Contains(","+*only+",", ","+n+",") }
	root, err := repo.Root()
	if err != nil {
		fatalf("%v", err)
	}
	plats := []v1.Platform{hostPlatform}
	if *platforms != "" {
		if *push == "" {
			fatalf("--platforms needs --push: a tarball holds one platform, this machine's")
		}
		if plats, err = parsePlatforms(*platforms); err != nil {
			fatalf("%v", err)
		}
	}
	var m meta
	if *push == "" {
		m = meta{version: version.Version, registry: LocalRepo, created: epoch}
		if *tag != "" {
			m.version = *tag
		}
	} else if m, err = buildMeta(root, *tag); err != nil {
		fatalf("%v", err)
	} else {
		m.registry = strings.TrimSuffix(*push, "/")
	}
	if m.version == "latest" {
		fatalf("--tag must be a fixed, non-latest tag")
	}
	tmp, err := os.MkdirTemp("", "kdefer-images-")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(tmp)

	var imgs []built
	if len(pushAs) > 0 && *push == "" {
		fatalf("--push-as needs --push")
	}
	// The local cluster's images are tarballs; pushed only as --push-as names them.
	local := func(n string) bool { return want(n) && (*push == "" || len(pushAs[n]) > 0) }
	if local("pause") {
		p, err := pauseImage(root, tmp)
		if err != nil {
			fatalf("pause image: %v", err)
		}
		imgs = append(imgs, p)
	}
	if local("busybox") {
		b, err := busyboxImage(*busybox)
		if err != nil {
			fatalf("busybox image: %v", err)
		}
		imgs = append(imgs, b)
	}
	for _, mb := range managers {
		if !want(mb.name) {
			continue
		}
		b, err := managerImage(mb)
		if err != nil {
			fatalf("%s image: %v", mb.name, err)
		}
		imgs = append(imgs, b)
	}
	for _, cmd := range kdeferCmds {
		if !want(cmd.name) {
			continue
		}
		img, ok, err := goImage(root, tmp, cmd, plats, m)
		if err != nil {
			fatalf("%s image: %v", cmd.name, err)
		}
		if !ok {
			fmt.Fprintf(os.Stderr, "images: %s does not exist yet: skipping its image\n", cmd.pkg)
			continue
		}
		imgs = append(imgs, img)
	}

	if *push != "" {
		if err := pushAll(imgs, *push, *refDir, pushAs, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			fatalf("%v", err)
		}
		return
	}
	if err := writeAll(imgs, *out); err != nil {
		fatalf("%v", err)
	}
}

// built is one image: a manifest per platform, and the annotations of
// their index.
type built struct {
	name, tag   string
	images      []platformImage
	annotations map[string]string
}

type platformImage struct {
	platform v1.Platform
	img      v1.Image
}

// index is the OCI image index of b's platforms, annotated as its images.
func (b built) index() v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pi := range b.images {
		p := pi.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        pi.img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}
	if len(b.annotations) > 0 {
		idx = mutate.Annotations(idx, b.annotations).(v1.ImageIndex)
	}
	return idx
}

func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--platforms %q: %w", s, err)
		}
		if p.OS != "linux" || p.Architecture == "" {
			return nil, fmt.Errorf("--platforms %q: want linux/ARCH entries (e.g. linux/amd64,linux/arm64)", s)
		}
		out = append(out, *p)
	}
	return out, nil
}

// parsePushAs reads --push-as NAME=REF.
func parsePushAs(v string) (n, ref string, err error) {
	n, ref, ok := strings.Cut(v, "=")
	if !ok || (n != "pause" && n != "busybox") {
		return "", "", fmt.Errorf("--push-as %q: want NAME=REF with NAME pause or busybox", v)
	}
	t, err := name.NewTag(ref, name.StrictValidation)
	if err != nil || t.TagStr() == "latest" {
		return "", "", fmt.Errorf("--push-as %q: REF must be HOST[:PORT]/PATH:TAG with a fixed tag (not latest): %v", v, err)
	}
	return n, ref, nil
}

// pushAll pushes every image as an index REPO/NAME:TAG and, with refDir,
// records REPO/NAME:TAG@DIGEST in refDir/NAME.pushed. An image that pushAs
// names is pushed under those references instead.
func pushAll(imgs []built, repo, refDir string, pushAs map[string][]string, opts ...remote.Option) error {
	for _, b := range imgs {
		if refs := pushAs[b.name]; len(refs) > 0 {
			for _, r := range refs {
				ref, err := name.NewTag(r)
				if err != nil {
					return err
				}
				if err := remote.WriteIndex(ref, b.index(), opts...); err != nil {
					return fmt.Errorf("push %s as %s: %w", b.name, ref, err)
				}
				fmt.Printf("pushed %s as %s\n", b.name, ref)
			}
			continue
		}
		ref, err := name.NewTag(strings.TrimSuffix(repo, "/") + "/" + b.name + ":" + b.tag)
		if err != nil {
			return err
		}
		idx := b.index()
		if err := remote.WriteIndex(ref, idx, opts...); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("pushed %s@%s (%d platforms)\n", ref, d, len(b.images))
		if refDir != "" {
			if err := os.MkdirAll(refDir, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(refDir, b.name+".pushed"), []byte(ref.String()+"@"+d.String()+"\n"), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeAll writes DIR/NAME.tar (docker archive tagged LocalRepo/NAME:TAG) and DIR/NAME.ref for every image.
func writeAll(imgs []built, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, b := range imgs {
		ref, err := name.NewTag(LocalRepo + "/" + b.name + ":" + b.tag)
		if err != nil {
			return err
		}
		if len(b.images) != 1 {
			return fmt.Errorf("%s: a tarball holds one platform, not %d", b.name, len(b.images))
		}
		img := b.images[0].img
		file := filepath.Join(dir, b.name+".tar")
		if err := writeAtomic(file, func(f string) error { return tarball.WriteToFile(f, ref, img) }); err != nil {
			return fmt.Errorf("write %s: %w", file, err)
		}
		if err := os.WriteFile(filepath.Join(dir, b.name+".ref"), []byte(ref.String()+"\n"), 0o644); err != nil {
			return err
		}
		d, _ := img.Digest()
		fmt.Printf("%-50s %s %s\n", ref.String(), file, d)
	}
	return nil
}

func writeAtomic(path string, write func(string) error) error {
	tmp := path + ".tmp"
	if err := write(tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "images: "+format+"\n", args...)
	os.Exit(1)
}
