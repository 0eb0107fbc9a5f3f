package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kdefer/kdefer/api/v1alpha1"
)

// pushed is one image index the builder pushed: REPO/NAME:TAG and its digest.
type pushed struct {
	name   string // kdefer-controller, kdefer-stage
	ref    name.Tag
	digest v1.Hash
}

func (p pushed) digestRef() name.Digest { return p.ref.Context().Digest(p.digest.String()) }

// pushImages runs the one image builder (test/images, what `make images
// REGISTRY=…` runs) for kdefer's two images and reads what it pushed from
// OUT/images/NAME.pushed; the version is their tag (the builder's git
// describe when o.version is empty).
func pushImages(root string, o options) ([]pushed, string, error) {
	dir := filepath.Join(o.out, "images")
	if err := os.RemoveAll(dir); err != nil {
		return nil, "", err
	}
	args := []string{"run", "./test/images", "--push", o.registry, "--platforms", o.platforms, "--ref-dir", dir,
		"--only", v1alpha1.ControllerImageName + "," + v1alpha1.StageImageName}
	if o.version != "" {
		args = append(args, "--tag", o.version)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	var out []pushed
	version := ""
	for _, n := range []string{v1alpha1.ControllerImageName, v1alpha1.StageImageName} {
		p, err := readPushed(filepath.Join(dir, n+".pushed"))
		if err != nil {
			return nil, "", err
		}
		p.name = n
		if version != "" && p.ref.TagStr() != version {
			return nil, "", fmt.Errorf("images tagged %s and %s: want one version", version, p.ref.TagStr())
		}
		version = p.ref.TagStr()
		out = append(out, p)
	}
	return out, version, nil
}

// readPushed reads a NAME.pushed file: REPO/NAME:TAG@sha256:HEX.
func readPushed(path string) (pushed, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return pushed{}, fmt.Errorf("what the image builder pushed: %w", err)
	}
	s := strings.TrimSpace(string(data))
	ref, dig, ok := strings.Cut(s, "@")
	if !ok {
		return pushed{}, fmt.Errorf("%s: %q is not REF@DIGEST", path, s)
	}
	t, err := name.NewTag(ref)
	if err != nil {
		return pushed{}, fmt.Errorf("%s: %w", path, err)
	}
	h, err := v1.NewHash(dig)
	if err != nil {
		return pushed{}, fmt.Errorf("%s: %w", path, err)
	}
	return pushed{ref: t, digest: h}, nil
}
