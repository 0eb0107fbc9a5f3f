package stagecontract

import (
	"encoding/json"
	"time"
)

// ReservedDir is the directory, under a stage-out prefix, that holds kdefer's
// own objects (the manifest). Files and keys under it are refused, so a user
// file can never overwrite or fake a manifest.
const ReservedDir = "_kdefer/"

// ManifestKey is the object, under the stage-out prefix, written after every
// other object: its presence means the upload is complete.
const ManifestKey = ReservedDir + "manifest.json"

// ManifestVersion is the manifest schema version this code writes and reads.
const ManifestVersion = 1

// Manifest is the object written under PREFIX/_kdefer/manifest.json after
// every file of a stage-out is stored. Its presence means "complete".
type Manifest struct {
	Version int `json:"version"`
	// Tool is "kdefer-stage <version>".
	Tool string `json:"tool"`
	// Prefix is the destination URL without credentials or query.
	Prefix string `json:"prefix"`
	// Identity holds the KDEFER_* environment (namespace, job, pod, node,
	// uid, index) that was set; IdentityEnv names the variables.
	Identity map[string]string `json:"identity,omitempty"`
	Trigger  string            `json:"trigger,omitempty"`
	ExitCode string            `json:"exitCode,omitempty"`
	Start    time.Time         `json:"start"`
	End      time.Time         `json:"end"`
	// TotalBytes is the sum of Files[].Size.
	TotalBytes int64          `json:"totalBytes"`
	Files      []ManifestFile `json:"files"`
}

// ManifestFile is one stored object. Key is relative to the prefix, so a
// copied prefix keeps a valid manifest.
type ManifestFile struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
	// Checksum is the object's CRC32C as "crc32c:" and 8 lowercase hex digits.
	Checksum string    `json:"checksum"`
	ModTime  time.Time `json:"mtime"`
}

// Marshal encodes the manifest (indented: people read it).
func (m *Manifest) Marshal() ([]byte, error) {
	return json.MarshalIndent(m, "", " ")
}
