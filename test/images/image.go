package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
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

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is the time of the local cluster's own images (pause, busybox):
// fixed, so that they change only when their content does.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// hostPlatform is the platform of the machine running the builder.
var hostPlatform = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}

// file is one entry of an image layer.
type file struct {
	path     string // without leading slash
	mode     int64
	data     []byte // regular file content
	linkname string // symlink target (type symlink when set)
	dir      bool
}

// goCmd is a Go command packaged as a one-binary image.
type goCmd struct {
	name, pkg, user string
}

// kdeferCmds are kdefer's images, named as api/v1alpha1 names them.
var kdeferCmds = []goCmd{
	{name: stageImageName, pkg: "./cmd/" + stageImageName},
	{name: controllerImageName, pkg: "./cmd/" + controllerImageName, user: "65532:65532"},
}

func pauseImage(root, tmp string) (built, error) {
	bin := filepath.Join(tmp, "pause")
	if err := goBuild(root, "./test/images/pause", bin, "", hostPlatform); err != nil {
		return built{}, err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return built{}, err
	}
	img, err := image([]file{{path: "pause", mode: 0o755, data: data}}, hostPlatform, epoch, v1.Config{
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
	})
	return built{name: "pause", tag: PauseTag, images: []platformImage{{hostPlatform, img}}}, err
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
	img, err := image(files, hostPlatform, epoch, v1.Config{
		Cmd: []string{"sh"},
		Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
	})
	return built{name: "busybox", tag: string(m[1]), images: []platformImage{{hostPlatform, img}}}, err
}

// goImage builds cmd statically for each platform (CGO_ENABLED=0 cross
// compiles) into a one-binary image with m's version stamped in and its
// OCI annotations; ok is false when the package does not exist.
func goImage(root, tmp string, cmd goCmd, platforms []v1.Platform, m meta) (b built, ok bool, err error) {
	gos, _ := filepath.Glob(filepath.Join(root, cmd.pkg, "*.go"))
	if len(gos) == 0 {
		return built{}, false, nil
	}
	b = built{name: cmd.name, tag: m.version, annotations: m.annotations()}
	for _, p := range platforms {
		bin := filepath.Join(tmp, cmd.name+"-"+p.Architecture)
		ld := "-X github.com/kdefer/kdefer/internal/version.Version=" + m.version +
			" -X github.com/kdefer/kdefer/internal/version.Registry=" + m.registry
		if err := goBuild(root, cmd.pkg, bin, ld, p); err != nil {
			return built{}, true, err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return built{}, true, err
		}
		img, err := image(scratchFiles(cmd.name, data), p, m.created, v1.Config{
			Entrypoint: []string{"/" + cmd.name},
			User:       cmd.user,
			Labels:     b.annotations,
		})
		if err != nil {
			return built{}, true, err
		}
		b.images = append(b.images, platformImage{p, mutate.Annotations(img, b.annotations).(v1.Image)})
	}
	return b, true, nil
}

// scratchFiles are the files of a one-binary FROM-scratch image: the
// static binary at /path, /tmp, a passwd and group naming root and nonroot
// (65532), and the host's CA bundle.
func scratchFiles(path string, bin []byte) []file {
	files := []file{
		{path: path, mode: 0o755, data: bin},
		{path: "tmp", dir: true, mode: 0o1777},
		{path: "etc", dir: true, mode: 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
	}
	// Trust the host's CA bundle, so TLS to an object store works from a
	// FROM-scratch image. It is an input like the Go toolchain: the same
	// on two machines only with the same ca-certificates package.
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files = append(files,
			file{path: "etc/ssl", dir: true, mode: 0o755},
			file{path: "etc/ssl/certs", dir: true, mode: 0o755},
			file{path: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca})
	}
	return files
}

// managerBin is another project's prebuilt manager: the image name, its
// tag (the project's version) and the binary.
type managerBin struct{ name, tag, bin string }

// parseManager reads --manager NAME:TAG=BIN.
func parseManager(v string) (managerBin, error) {
	ref, bin, ok := strings.Cut(v, "=")
	n, tag, ok2 := strings.Cut(ref, ":")
	if !ok || !ok2 || n == "" || tag == "" || bin == "" || tag == "latest" {
		return managerBin{}, fmt.Errorf("--manager %q: want NAME:TAG=BIN with a fixed TAG (e.g. kueue:v0.17.0=/path/to/kueue)", v)
	}
	return managerBin{name: n, tag: tag, bin: bin}, nil
}

// managerImage packages another project's controller-runtime manager (Kueue's,
// JobSet's), a static binary built by test/tools/install.sh, as kdefer's own
// are packaged: FROM scratch, for this machine's platform, at /manager (the
// command of both projects' own Deployments, config/components/manager), run
// as nonroot (65532: the Deployments ask runAsNonRoot without a user).
func managerImage(m managerBin) (built, error) {
	if err := mustBeStatic(m.bin); err != nil {
		return built{}, err
	}
	data, err := os.ReadFile(m.bin)
	if err != nil {
		return built{}, err
	}
	img, err := image(scratchFiles("manager", data), hostPlatform, epoch, v1.Config{
		Entrypoint: []string{"/manager"},
		User:       "65532:65532",
	})
	return built{name: m.name, tag: m.tag, images: []platformImage{{hostPlatform, img}}}, err
}

// image makes a one-layer OCI image of files for platform p, every time
// in it (creation, files) t.
func image(files []file, p v1.Platform, t time.Time, cfg v1.Config) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	sort.SliceStable(files, func(i, j int) bool { return files[i].path < files[j].path })
	for _, f := range files {
		h := &tar.Header{Name: f.path, Mode: f.mode, ModTime: t, Format: tar.FormatPAX}
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
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: t}
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}

// goBuild builds a static, stripped binary of pkg (relative to the module root) for p at out.
func goBuild(root, pkg, out, ldflags string, p v1.Platform) error {
	cmd := exec.Command("go", "build", "-trimpath", "-gcflags=all=-dwarf=false", "-ldflags", strings.TrimSpace("-s -w "+ldflags), "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if p.Architecture == "arm" && p.Variant != "" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w", pkg, p, err)
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
