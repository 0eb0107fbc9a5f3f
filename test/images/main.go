// Command images builds the container images of kdefer and of its local test
// cluster without a Docker engine or a registry, as docker-archive tarballs
// that `ctr -n k8s.io images import` (test/cluster/cluster.sh load-images)
// accepts, or pushes kdefer's images to a registry:
//
//	go run ./test/images --out bin/images                 # tarballs + NAME.ref files
//	go run ./test/images --out bin/images --push REGISTRY # push kdefer-stage and kdefer-controller
//	go run ./test/images --out bin/images --only pause,busybox
//
// Images (local names; tags are never "latest"):
//
//	kdefer.io/pause:1.0                  the sandbox image (test/images/pause)
//	kdefer.io/busybox:VERSION            Debian's busybox-static with its applet links
//	kdefer.io/kdefer-stage:TAG           ./cmd/kdefer-stage, when that package exists
//	kdefer.io/kdefer-controller:TAG      ./cmd/kdefer-controller, when that package exists
//
// kdefer.io and the names come from api/v1alpha1 (ImageRepository,
// StageImageName, ControllerImageName); TAG defaults to version.Version, which
// is also stamped into the binaries, so v1alpha1.DefaultStageImage() names the
// image built here.
//
// Every file gets a fixed timestamp, so identical binaries give identical
// image digests.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/kdefer/kdefer/test/repo"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/internal/version"
)

// LocalRepo prefixes every image built for the local cluster.
const LocalRepo = v1alpha1.ImageRepository

// PauseTag is the pause image's tag; bump it when test/images/pause changes meaningfully.
const PauseTag = "1.0"

var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func main() {
	out := flag.String("out", "bin/images", "directory for NAME.tar and NAME.ref")
	push := flag.String("push", "", "registry/repository to push kdefer's images to instead of writing tarballs")
	tag := flag.String("tag", envOr("KDEFER_IMAGE_TAG", version.Version), "tag of kdefer's images (not \"latest\")")
	busybox := flag.String("busybox", "/bin/busybox", "static busybox binary (Debian's busybox-static)")
	only := flag.String("only", "", "comma-separated images to build (default: all)")
	flag.Parse()
	want := func(n string) bool { return *only == "" || strings.Contains(","+*only+",", ","+n+",") }
	if *tag == "latest" || *tag == "" {
		fatalf("--tag must be a fixed, non-latest tag")
	}
	root, err := repo.Root()
	if err != nil {
		fatalf("%v", err)
	}
	tmp, err := os.MkdirTemp("", "kdefer-images-")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(tmp)

	var imgs []built
	if *push == "" && want("pause") {
		p, err := pauseImage(root, tmp)
		if err != nil {
			fatalf("pause image: %v", err)
		}
		imgs = append(imgs, p)
	}
	if *push == "" && want("busybox") {
		b, err := busyboxImage(*busybox)
		if err != nil {
			fatalf("busybox image: %v", err)
		}
		imgs = append(imgs, b)
	}
	for _, cmd := range []struct{ name, user string }{
		{v1alpha1.StageImageName, ""},
		{v1alpha1.ControllerImageName, "65532:65532"},
	} {
		if !want(cmd.name) {
			continue
		}
		img, ok, err := goImage(root, tmp, cmd.name, cmd.user, *tag)
		if err != nil {
			fatalf("%s image: %v", cmd.name, err)
		}
		if !ok {
			fmt.Fprintf(os.Stderr, "images: ./cmd/%s does not exist yet: skipping its image\n", cmd.name)
			continue
		}
		imgs = append(imgs, img)
	}

	if *push != "" {
		if err := pushAll(imgs, *push, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			fatalf("%v", err)
		}
		return
	}
	if err := writeAll(imgs, *out); err != nil {
		fatalf("%v", err)
	}
}

// pushAll pushes every image as REPO/NAME:TAG.
func pushAll(imgs []built, repo string, opts ...remote.Option) error {
	for _, b := range imgs {
		ref, err := name.NewTag(strings.TrimSuffix(repo, "/") + "/" + b.name + ":" + b.tag)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, b.img, opts...); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		d, _ := b.img.Digest()
		fmt.Printf("pushed %s@%s\n", ref, d)
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
		file := filepath.Join(dir, b.name+".tar")
		if err := writeAtomic(file, func(f string) error { return tarball.WriteToFile(f, ref, b.img) }); err != nil {
			return fmt.Errorf("write %s: %w", file, err)
		}
		if err := os.WriteFile(filepath.Join(dir, b.name+".ref"), []byte(ref.String()+"\n"), 0o644); err != nil {
			return err
		}
		d, _ := b.img.Digest()
		fmt.Printf("%-50s %s %s\n", ref.String(), file, d)
	}
	return nil
}

type built struct {
	name, tag string
	img       v1.Image
}

// file is one entry of an image layer.
type file struct {
	path     string // without leading slash
	mode     int64
	data     []byte // regular file content
	linkname string // symlink target (type symlink when set)
	dir      bool
}

func pauseImage(root, tmp string) (built, error) {
	bin := filepath.Join(tmp, "pause")
	if err := goBuild(root, "./test/images/pause", bin, ""); err != nil {
		return built{}, err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return built{}, err
	}
	img, err := image([]file{{path: "pause", mode: 0o755, data: data}}, v1.Config{
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
	})
	return built{"pause", PauseTag, img}, err
}

var busyboxVersion = regexp.MustCompile(`BusyBox v([0-9]+\.[0-9]+\.[0-9]+)`)

func busyboxImage(path string) (built, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return built{}, fmt.Errorf("%w (install Debian's busybox-static: test/cluster/cluster.sh deps)", err)
	}
	if err := mustBeStatic(path); err != nil {
		return built{}, fmt.Errorf("%v (install busybox-static, not busybox)", err)
	}
	out, err := exec.Command(path).CombinedOutput()
	m := busyboxVersion.FindSubmatch(out)
	if m == nil {
		return built{}, fmt.Errorf("cannot read the version of %s: %v: %.200s", path, err, out)
	}
	list, err := exec.Command(path, "--list-full").Output()
	if err != nil {
		return built{}, fmt.Errorf("%s --list-full: %v", path, err)
	}
	files := []file{
		{path: "bin", dir: true, mode: 0o755},
		{path: "bin/busybox", mode: 0o755, data: data},
		{path: "etc", dir: true, mode: 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{path: "root", dir: true, mode: 0o700},
		{path: "tmp", dir: true, mode: 0o1777},
		{path: "sbin", dir: true, mode: 0o755},
		{path: "usr", dir: true, mode: 0o755},
		{path: "usr/bin", dir: true, mode: 0o755},
		{path: "usr/sbin", dir: true, mode: 0o755},
	}
	seen := map[string]bool{"bin/busybox": true}
	for _, p := range strings.Fields(string(list)) {
		p = strings.TrimPrefix(p, "/")
		if seen[p] || !strings.Contains(p, "/") {
			continue
		}
		seen[p] = true
		files = append(files, file{path: p, mode: 0o777, linkname: "/bin/busybox"})
	}
	img, err := image(files, v1.Config{
		Cmd: []string{"sh"},
		Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
	})
	return built{"busybox", string(m[1]), img}, err
}

// goImage builds ./cmd/NAME statically into a one-binary image; ok is false when the package does not exist.
func goImage(root, tmp, cmdName, user, tag string) (b built, ok bool, err error) {
	pkgDir := filepath.Join(root, "cmd", cmdName)
	gos, _ := filepath.Glob(filepath.Join(pkgDir, "*.go"))
	if len(gos) == 0 {
		return built{}, false, nil
	}
	bin := filepath.Join(tmp, cmdName)
	ld := "-X github.com/kdefer/kdefer/internal/version.Version=" + tag
	if err := goBuild(root, "./cmd/"+cmdName, bin, ld); err != nil {
		return built{}, true, err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return built{}, true, err
	}
	files := []file{
		{path: cmdName, mode: 0o755, data: data},
		{path: "tmp", dir: true, mode: 0o1777},
		{path: "etc", dir: true, mode: 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
	}
	// Trust the host's CA bundle, so TLS to an object store works from a FROM-scratch image.
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files = append(files,
			file{path: "etc/ssl", dir: true, mode: 0o755},
			file{path: "etc/ssl/certs", dir: true, mode: 0o755},
			file{path: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca})
	}
	img, err := image(files, v1.Config{Entrypoint: []string{"/" + cmdName}, User: user})
	return built{cmdName, tag, img}, true, err
}

// image makes a one-layer linux image of files with the given runtime config.
func image(files []file, cfg v1.Config) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	sort.SliceStable(files, func(i, j int) bool { return files[i].path < files[j].path })
	for _, f := range files {
		h := &tar.Header{Name: f.path, Mode: f.mode, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, f.path+"/"
		case f.linkname != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.linkname
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}

// goBuild builds a static, stripped binary of pkg (relative to the module root) at out.
func goBuild(root, pkg, out, ldflags string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w "+ldflags), "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return mustBeStatic(out)
}

// mustBeStatic fails for a dynamically linked ELF file (one with an interpreter).
func mustBeStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
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

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "images: "+format+"\n", args...)
	os.Exit(1)
}
