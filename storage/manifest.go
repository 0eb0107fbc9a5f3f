package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"

	"github.com/kdefer/kdefer/stagecontract"
)

// maxManifestSize bounds what ParseManifest accepts (~1M files).
const maxManifestSize = 256 << 20

// ParseManifest decodes and validates a manifest. Everything stage-in will
// use is checked here, so a hostile manifest is refused before anything is
// written: keys must pass CheckRel and be unique, sizes non-negative,
// checksums well formed, and links stay inside the tree (checkLinks).
func ParseManifest(data []byte) (*stagecontract.Manifest, error) {
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("manifest is %d bytes, more than the %d accepted", len(data), maxManifestSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m stagecontract.Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("decode manifest: trailing data after the JSON object")
	}
	if m.Version != stagecontract.ManifestVersion {
		return nil, fmt.Errorf("manifest version %d is not supported (want %d)", m.Version, stagecontract.ManifestVersion)
	}
	seen := make(map[string]struct{}, len(m.Files))
	var total int64
	for i, f := range m.Files {
		if err := checkManifestKey(f); err != nil {
			return nil, fmt.Errorf("manifest file %d: %w", i, err)
		}
		if _, dup := seen[f.Key]; dup {
			return nil, fmt.Errorf("manifest file %d: key %q is listed twice", i, f.Key)
		}
		seen[f.Key] = struct{}{}
		if f.Size < 0 {
			return nil, fmt.Errorf("manifest file %d (%q): negative size %d", i, f.Key, f.Size)
		}
		if _, err := ParseChecksum(f.Checksum); err != nil {
			return nil, fmt.Errorf("manifest file %d (%q): %w", i, f.Key, err)
		}
		if _, err := ParseExtra(f.Checksums); err != nil {
			return nil, fmt.Errorf("manifest file %d (%q): %w", i, f.Key, err)
		}
		total += f.Size
		if total < 0 {
			return nil, fmt.Errorf("manifest sizes overflow")
		}
	}
	if err := checkLinks(m.Links, seen); err != nil {
		return nil, err
	}
	if total != m.TotalBytes {
		return nil, fmt.Errorf("manifest totalBytes %d is not the sum of file sizes %d", m.TotalBytes, total)
	}
	return &m, nil
}

// checkManifestKey checks a file's key, and for a name the store could not
// hold, that the key is the encoding of a name that stays inside the tree
// (DecodeName, CheckName) and that Path records that name.
func checkManifestKey(f stagecontract.ManifestFile) error {
	if f.Path == "" {
		return CheckRel(f.Key)
	}
	name, err := DecodeName(f.Key)
	if err != nil {
		return err
	}
	if f.Path != ManifestPath(name) {
		return fmt.Errorf("path %q is not the name key %q encodes", f.Path, f.Key)
	}
	return nil
}

// NameOf returns the local relative path of a file of a manifest that
// ParseManifest accepted: its key, or the name its encoded key holds.
func NameOf(f stagecontract.ManifestFile) string {
	if f.Path == "" {
		return f.Key
	}
	name, _ := DecodeName(f.Key) // checked by ParseManifest
	return name
}

// SameFiles reports whether a and b list the same keys, sizes and checksums
// (the optional ones included: a rerun asked for another set rewrites the
// manifest).
func SameFiles(a, b []stagecontract.ManifestFile) bool {
	if len(a) != len(b) {
		return false
	}
	idx := make(map[string]stagecontract.ManifestFile, len(a))
	for _, f := range a {
		idx[f.Key] = f
	}
	for _, f := range b {
		g, ok := idx[f.Key]
		if !ok || g.Size != f.Size || g.Checksum != f.Checksum || !maps.Equal(g.Checksums, f.Checksums) {
			return false
		}
	}
	return true
}

// ReadManifest fetches and parses the manifest at key.
func ReadManifest(ctx context.Context, be Backend, key string, retry RetryPolicy) (*stagecontract.Manifest, error) {
	var data []byte
	err := retry.Do(ctx, func(ctx context.Context) error {
		r, _, err := be.NewReader(ctx, key, 0, -1)
		if err != nil {
			return err
		}
		defer r.Close()
		data, err = io.ReadAll(io.LimitReader(r, maxManifestSize+1))
		return err
	})
	if err != nil {
		return nil, WithOp("read manifest", err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, Permanentf("point the URL at a manifest written by kdefer-stage out", "read manifest: %w", err)
	}
	return m, nil
}

// ReadManifestWriter returns the identity of the manifest at key (who wrote
// it: stagecontract.IdentityEnv's keys), nil when it records none, without
// reading its file list: a prefix's manifest may list a million files, and
// a stage-out that only asks whose outputs a prefix holds must not hold them
// all in memory. kdefer-stage writes the identity before the files (the
// field order of stagecontract.Manifest), so the decoder stops at the first
// field that comes after it.
func ReadManifestWriter(ctx context.Context, be Backend, key string, retry RetryPolicy) (map[string]string, error) {
	var id map[string]string
	err := retry.Do(ctx, func(ctx context.Context) error {
		id = nil
		r, _, err := be.NewReader(ctx, key, 0, -1)
		if err != nil {
			return err
		}
		defer r.Close()
		id, err = decodeIdentity(json.NewDecoder(io.LimitReader(r, maxManifestSize)))
		return err
	})
	return id, WithOp("read manifest", err)
}

// decodeIdentity reads the top-level fields of a manifest up to its
// identity. A manifest that is not a JSON object is permanent trouble.
func decodeIdentity(dec *json.Decoder) (map[string]string, error) {
	bad := func(err error) error {
		return Permanentf("remove or repair the manifest", "decode manifest: %w", err)
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, bad(fmt.Errorf("not a JSON object"))
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, bad(err)
		}
		switch t {
		case "version", "tool", "prefix":
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, bad(err)
			}
		case "identity":
			var id map[string]string
			if err := dec.Decode(&id); err != nil {
				return nil, bad(err)
			}
			return id, nil
		default:
			return nil, nil
		}
	}
	return nil, nil
}
