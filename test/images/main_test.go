package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/test/repo"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestPauseImageTarballAndPush(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	p, err := pauseImage(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p2, err := pauseImage(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := p.images[0].img.Digest()
	d2, _ := p2.images[0].img.Digest()
	if d1 != d2 {
		t.Errorf("pause image not reproducible: %s != %s", d1, d2)
	}
	cf, err := p.images[0].img.ConfigFile()
	if err != nil || cf.OS != "linux" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/pause" {
		t.Fatalf("config %+v %v", cf, err)
	}

	// The tarball is a docker archive tagged kdefer.io/pause:1.0, with a .ref beside it.
	dir := t.TempDir()
	if err := writeAll([]built{p}, dir); err != nil {
		t.Fatal(err)
	}
	ref, err := os.ReadFile(filepath.Join(dir, "pause.ref"))
	if err != nil || strings.TrimSpace(string(ref)) != LocalRepo+"/pause:"+PauseTag {
		t.Fatalf("ref %q %v", ref, err)
	}
	tag, _ := name.NewTag(strings.TrimSpace(string(ref)))
	back, err := tarball.ImageFromPath(filepath.Join(dir, "pause.tar"), &tag)
	if err != nil {
		t.Fatal(err)
	}
	// A docker archive records no media types (the manifest read back is
	// Docker's, not the OCI one built): the config is what must survive.
	c1, _ := p.images[0].img.ConfigName()
	if c, _ := back.ConfigName(); c != c1 {
		t.Errorf("tarball config %s, want %s", c, c1)
	}

	// --push: an in-process registry on loopback receives the same image.
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/kdefer"
	if err := pushAll([]built{p}, repo, "", nil); err != nil {
		t.Fatal(err)
	}
	pushed, err := name.ParseReference(repo + "/pause:" + PauseTag)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(pushed, remote.WithPlatform(hostPlatform))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := pulled.Digest(); d != d1 {
		t.Errorf("pushed digest %s, want %s", d, d1)
	}

	// --push-as: the same image under another suite's own name and tag,
	// and not under kdefer's.
	host := strings.TrimPrefix(srv.URL, "http://")
	as := host + "/upstream/pause:3.10.2"
	if err := pushAll([]built{p}, host+"/other", "", map[string][]string{"pause": {as}}); err != nil {
		t.Fatal(err)
	}
	asRef, _ := name.ParseReference(as)
	if pulled, err = remote.Image(asRef, remote.WithPlatform(hostPlatform)); err != nil {
		t.Fatal(err)
	}
	if d, _ := pulled.Digest(); d != d1 {
		t.Errorf("digest pushed as %s: %s, want %s", as, d, d1)
	}
	if ownRef, _ := name.ParseReference(host + "/other/pause:" + PauseTag); func() bool { _, err := remote.Head(ownRef); return err == nil }() {
		t.Errorf("pushed as %s, and also as %s", as, ownRef)
	}
}

func TestParsePushAs(t *testing.T) {
	for _, bad := range []string{"pause", "kdefer-stage=h:5000/x:1", "busybox=h:5000/x:latest", "busybox=h:5000/x", "busybox="} {
		if _, _, err := parsePushAs(bad); err == nil {
			t.Errorf("parsePushAs(%q): no error", bad)
		}
	}
	if n, ref, err := parsePushAs("busybox=10.88.0.1:5000/e2e-test-images/busybox:1.37.0-2"); err != nil || n != "busybox" || ref != "10.88.0.1:5000/e2e-test-images/busybox:1.37.0-2" {
		t.Errorf("parsePushAs: %q %q %v", n, ref, err)
	}
}

func TestBusyboxImage(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("no /bin/busybox (test/cluster/cluster.sh deps installs busybox-static)")
	}
	b, err := busyboxImage("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.tag, "1.") {
		t.Errorf("tag %q", b.tag)
	}
	layers, err := b.images[0].img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v %v", layers, err)
	}
}

// TestManagerImage: another project's prebuilt manager (Kueue's, JobSet's)
// becomes a FROM-scratch image that the project's own Deployment runs
// unchanged: /manager, as a non-root user by number (runAsNonRoot without
// runAsUser needs one), named and tagged as --manager says; a dynamically
// linked binary is refused (it could not run from scratch), and so is a
// --manager without a name, a tag, or with tag latest.
func TestManagerImage(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "manager")
	if err := goBuild(root, "./test/images/pause", bin, "", hostPlatform); err != nil {
		t.Fatal(err)
	}
	m, err := parseManager("jobset:v0.11.1=" + bin)
	if err != nil {
		t.Fatal(err)
	}
	k, err := managerImage(m)
	if err != nil {
		t.Fatal(err)
	}
	if k.name != "jobset" || k.tag != "v0.11.1" || len(k.images) != 1 {
		t.Fatalf("built %s:%s with %d platforms", k.name, k.tag, len(k.images))
	}
	cf, err := k.images[0].img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != "/manager" || cf.Config.User != "65532:65532" {
		t.Errorf("entrypoint %v user %q, want [/manager] 65532:65532", ep, cf.Config.User)
	}
	if _, err := os.Stat("/bin/dash"); err == nil {
		if _, err := managerImage(managerBin{"kueue", "v0.17.0", "/bin/dash"}); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
			t.Errorf("a dynamically linked binary: err %v, want it refused", err)
		}
	}
	for _, bad := range []string{"kueue=" + bin, "kueue:=" + bin, ":v1=" + bin, "kueue:v1", "kueue:latest=" + bin} {
		if _, err := parseManager(bad); err == nil {
			t.Errorf("--manager %q accepted, want it refused", bad)
		}
	}
}
