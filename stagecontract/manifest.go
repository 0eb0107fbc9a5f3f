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

// UncommittedKey is the object, under the stage-out prefix, a stage-out
// writes before it changes any other and removes once its manifest is
// written: a prefix that holds it and no manifest is an upload that never
// finished (stopped, failed, or still running), which stage-in refuses.
const UncommittedKey = ReservedDir + "uncommitted"

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
	// Links lists the names under the root that a stage-out recorded as
	// links instead of storing their content: the other names of a file
	// stored once (hard), and symbolic links that resolve inside the root.
	// Absent when there are none, so that such a manifest is read by every
	// kdefer-stage; a kdefer-stage that does not know the field refuses a
	// manifest that has it rather than lose the links.
	Links []ManifestLink `json:"links,omitempty"`
	// Unsaved lists the files under the root that were not stored, each with
	// the reason. Empty means the manifest covers every file the filters chose.
	Unsaved []UnsavedFile `json:"unsaved,omitempty"`
	// Logs lists the archived container logs, under LogsDir, of the pod
	// that ended (stage-out with logs on; see logs.go).
	Logs []ManifestFile `json:"logs,omitempty"`
	// LogWarnings lists the logs the stage-out step could not archive,
	// each with the reason (the kubelet had already removed an evicted
	// pod's containers, the endpoint was unreachable, ...): a log that is
	// neither in Logs nor here was never asked for. They do not make the
	// run incomplete: the logs are a record of the pod, not its outputs.
	LogWarnings []LogWarning `json:"logWarnings,omitempty"`
}

// UnsavedFile is a file a stage-out chose but could not store.
type UnsavedFile struct {
	// Path is the file's path relative to the root, quoted with strconv.Quote
	// when it is not valid UTF-8 (JSON could not carry it otherwise).
	Path string `json:"path"`
	// Reason says why, for a person: "not a regular file", "permission
	// denied", "vanished after the walk", "changed while read", ...
	Reason string `json:"reason"`
}

// ManifestFile is one stored object. Key is relative to the prefix, so a
// copied prefix keeps a valid manifest.
type ManifestFile struct {
	Key string `json:"key"`
	// Path is the file's path relative to the root when it differs from Key:
	// a name the store cannot hold (invalid UTF-8, control characters) is
	// stored under an encoded key and restored from Path by stage-in. Path is
	// quoted with strconv.Quote when it is not valid UTF-8.
	Path string `json:"path,omitempty"`
	Size int64  `json:"size"`
	// Checksum is the object's CRC32C as "crc32c:" and 8 lowercase hex digits.
	Checksum string `json:"checksum"`
	// Checksums holds the checksums asked for besides CRC32C
	// (ManifestChecksums: kdefer-stage out --checksums, the policy's
	// stageOut.checksums), by algorithm, in lowercase hex as data
	// catalogues register them: adler32 8 digits (Rucio), md5 32, sha256
	// 64. They are computed in the pass that uploads the file and verified
	// by stage-in. Absent when none was asked for, so a manifest without
	// them is read by every kdefer-stage.
	Checksums map[string]string `json:"checksums,omitempty"`
	ModTime   time.Time         `json:"mtime"`
	// truncated, on a log entry only (Manifest.Logs, StepLogs.Logs), says
	// the log was longer than stageOut.logs.maxBytes and what the object
	// holds of it (LogTruncation). Absent when the object is the whole log,
	// so that manifests without a cut log stay readable by a kdefer-stage
	// that does not know the field (it refuses unknown fields).
	Truncated *LogTruncation `json:"truncated,omitempty"`
}

// The kinds of ManifestLink.
const (
	LinkHard     = "hard"
	LinkSymbolic = "symbolic"
)

// ManifestLink is a name a stage-out recorded as a link, restored by
// stage-in as the same kind of link.
type ManifestLink struct {
	// path is the link's path relative to the root, written as a file's key
	// is: the name itself, or, for a name the store could not hold, its
	// encoded form under _kdefer/names/ (storage.EncodeName). It names no
	// object.
	Path string `json:"path"`
	// kind is "hard" or "symbolic"; a stage-in refuses a kind it does not
	// know.
	Kind string `json:"kind"`
	// target is, for a hard link, the key of the files entry whose content
	// the link shares (the first name of the file the walk met); for a
	// symbolic link, the link's text as written: relative, and resolving
	// inside the root, through the manifest's other symbolic links
	// included.
	Target string `json:"target"`
}

// The checksums a manifest records on request, besides CRC32C (the keys of
// ManifestFile.Checksums).
const (
	ChecksumAdler32 = "adler32"
	ChecksumMD5     = "md5"
	ChecksumSHA256  = "sha256"
)

// ManifestChecksums are the checksums a stage-out can be asked to record,
// in documentation order.
var ManifestChecksums = []string{ChecksumAdler32, ChecksumMD5, ChecksumSHA256}

// Marshal encodes the manifest (indented: people read it).
func (m *Manifest) Marshal() ([]byte, error) {
	return json.MarshalIndent(m, "", " ")
}
