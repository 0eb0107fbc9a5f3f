package main

import (
	"bytes"
	"crypto"
	"crypto/elliptic"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// cosign's conventions for a signature stored beside the image (the
// "simple signing" format that `cosign verify --key cosign.pub` reads): an
// OCI image tagged sha256-HEX.sig in the image's repository, one layer per
// signature, the layer the JSON payload naming the signed digest and the
// annotation its base64 signature.
const (
	simpleSigningMediaType = types.MediaType("application/vnd.dev.cosign.simplesigning.v1+json")
	signatureAnnotation    = "dev.cosignproject.cosign/signature"
)

// signer signs image digests with a cosign key. Signing and the key format
// are sigstore's own packages (the ones cosign signs with), not code of
// kdefer's: the payload is payload.Cosign's, the signature ECDSA P-256
// over its SHA-256 (cosign's default).
type signer struct {
	s signature.Signer
}

// loadSigner reads the PEM private key at path (encrypted keys, cosign
// generate-key-pair's, with COSIGN_PASSWORD); when the file does not exist
// it makes an unencrypted P-256 pair there and cosign.pub beside it, the
// local key of `make release` runs.
func loadSigner(path string) (*signer, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		priv, pub, gerr := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), nil)
		if gerr != nil {
			return nil, fmt.Errorf("generate a signing key: %w", gerr)
		}
		if err := os.WriteFile(path, priv, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(filepath.Dir(path), "cosign.pub"), pub, 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "release: made a signing key %s (public key cosign.pub beside it)\n", path)
		data, err = priv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	pass := func(bool) ([]byte, error) { return []byte(os.Getenv("COSIGN_PASSWORD")), nil }
	key, err := cryptoutils.UnmarshalPEMToPrivateKey(data, pass)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w (a PEM private key; COSIGN_PASSWORD for an encrypted one)", path, err)
	}
	s, err := signature.LoadSigner(key, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	// The public key the release ships is the key's own, so that a stale
	// cosign.pub beside a replaced key cannot go out.
	pub, err := s.PublicKey()
	if err != nil {
		return nil, err
	}
	pubPEM, err := cryptoutils.MarshalPublicKeyToPEM(pub)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "cosign.pub"), pubPEM, 0o644); err != nil {
		return nil, err
	}
	return &signer{s: s}, nil
}

// signed is a pushed signature: its tag and manifest digest.
type signed struct{ tag, digest string }

// signatureTag is where cosign looks for d's signatures: REPO:sha256-HEX.sig.
func signatureTag(d name.Digest) name.Tag {
	return d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1) + ".sig")
}

// sign pushes a signature of the image d (cosign's layout; it replaces an
// earlier signature of the same digest by this key's).
func (s *signer) sign(d name.Digest) (signed, error) {
	body, err := payload.Cosign{Image: d}.MarshalJSON()
	if err != nil {
		return signed{}, err
	}
	sig, err := s.s.SignMessage(bytes.NewReader(body))
	if err != nil {
		return signed{}, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:       static.NewLayer(body, simpleSigningMediaType),
		MediaType:   simpleSigningMediaType,
		Annotations: map[string]string{signatureAnnotation: base64.StdEncoding.EncodeToString(sig)},
	})
	if err != nil {
		return signed{}, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	tag := signatureTag(d)
	if err := remote.Write(tag, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return signed{}, fmt.Errorf("push %s: %w", tag, err)
	}
	h, err := img.Digest()
	if err != nil {
		return signed{}, err
	}
	return signed{tag: tag.String(), digest: h.String()}, nil
}
