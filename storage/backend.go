package storage

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/kdefer/kdefer/stagecontract"
)

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key     string
	Size    int64
	ModTime time.Time
	// CRC32C is the full-object CRC32C the store keeps for the object, valid
	// when HasCRC32C (S3 with checksums, GCS from Stat and List, file://
	// from Stat; stores that keep none leave it unset).
	CRC32C    uint32
	HasCRC32C bool
	// MD5 is the MD5 the store keeps (file:// and mem:// for what they
	// wrote, GCS for non-composite objects, the ETag of a single-part S3
	// object without SSE-KMS/SSE-C, from Stat and whole reads), or nil.
	MD5 []byte
	// Refused is set by List for an entry the store lists but will not
	// serve (file://: a symlink leading out of the directory, a FIFO, a
	// device): reading it would fail with this error, so a stage-in can
	// refuse the run before writing anything.
	Refused error
}

// Backend is the small interface every store implements. Keys are full
// object keys (prefix included). Implementations must be safe for
// concurrent use. Errors are classified (see ClassOf) where the backend
// knows better than the generic classifier.
type Backend interface {
	// Put stores size bytes of src (read from offset 0) under key, and
	// returns the CRC32C of the bytes it sent, computed in the same pass.
	// src is an io.ReaderAt so that a retry re-reads the file instead of
	// holding a copy in memory.
	Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts PutOptions) (uint32, error)
	// Stat returns the object's attributes, or an error wrapping ErrNotExist.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// NewReader reads length bytes from offset off (length < 0: to the end).
	// The returned ObjectInfo carries the full-object checksum when the
	// store sent one and the whole object is read.
	NewReader(ctx context.Context, key string, off, length int64) (io.ReadCloser, ObjectInfo, error)
	// List calls fn for every object whose key starts with prefix.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	Close() error
}

// PutOptions are what a store is told of an object besides its bytes.
type PutOptions struct {
	// Progress, when set, is called with each count of bytes sent.
	Progress func(int64)
	// ContentType of the object; empty means application/octet-stream.
	ContentType string
}

// ContentTypeOf returns the content type of a file named name by its
// extension (mime.TypeByExtension: Go's built-in table and the system's
// mime.types), else application/octet-stream, so that objects open in a
// browser or a console as what they are.
func ContentTypeOf(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return DefaultContentType
}

// DefaultContentType is the content type of bytes of unknown kind.
const DefaultContentType = "application/octet-stream"

// Multipart is implemented by backends that can upload parts of one object
// in parallel (S3). The engine schedules the parts on its shared workers.
type Multipart interface {
	// PartSize returns the part size for an object of size bytes, or 0 when
	// it should be uploaded with a single Put.
	PartSize(size int64) int64
	Begin(ctx context.Context, key string, opts PutOptions) (Upload, error)
}

// Upload is one multipart upload in progress.
type Upload interface {
	// PutPart uploads part n (1-based); it returns the part's CRC32C.
	PutPart(ctx context.Context, n int, src io.Reader, size int64) (Part, error)
	// Complete assembles the parts; crc is the full-object CRC32C, which the
	// server checks against the parts.
	Complete(ctx context.Context, parts []Part, crc uint32) error
	Abort(ctx context.Context) error
}

// Part is a stored part.
type Part struct {
	N    int
	ETag string
	Size int64
	CRC  uint32
}

// Location is a parsed stage URL.
type Location struct {
	// Scheme is s3, file, mem, gs or azblob.
	Scheme string
	// Bucket is the bucket (s3, gs), container (azblob), directory (file)
	// or name (mem).
	Bucket string
	// Prefix is the key prefix, empty or ending in "/".
	Prefix string
	// Query holds the URL's parameters (passed to the backend, which
	// rejects unknown ones).
	Query url.Values
}

// ParseURL parses a stage URL. For file:// the whole path is the directory
// objects are stored in and the prefix is empty; for the others the host
// is the bucket and the path the prefix. Credentials in the URL are refused:
// URLs end up in pod specs, logs and manifests.
func ParseURL(raw string) (Location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse quotes the whole input; say what is wrong without echoing it.
		var ue *url.Error
		msg := err.Error()
		if asURLError(err, &ue) {
			msg = ue.Err.Error()
		}
		return Location{}, Permanentf("write the URL as scheme://bucket/prefix[?params]", "malformed URL: %s", msg)
	}
	if u.User != nil {
		return Location{}, Permanentf("remove the credentials from the URL; pass them as environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...) or the backend's credential file",
			"URL %s carries credentials", Redact(raw))
	}
	if u.Fragment != "" || u.Opaque != "" {
		return Location{}, Permanentf("write the URL as scheme://bucket/prefix[?params]", "malformed URL %s", Redact(raw))
	}
	loc := Location{Scheme: u.Scheme, Query: u.Query()}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, Permanentf("use file:///absolute/path", "file URL %s has a host", Redact(raw))
		}
		if !strings.HasPrefix(u.Path, "/") {
			return Location{}, Permanentf("use file:///absolute/path", "file URL %s is not absolute", Redact(raw))
		}
		loc.Bucket = strings.TrimSuffix(u.Path, "/")
		if loc.Bucket == "" {
			loc.Bucket = "/"
		}
	case "s3", "gs", "azblob", "mem":
		if u.Host == "" && u.Scheme != "mem" {
			return Location{}, Permanentf("write the URL as "+u.Scheme+"://bucket/prefix", "URL %s has no bucket", Redact(raw))
		}
		loc.Bucket = u.Host
		p := strings.TrimPrefix(u.Path, "/")
		if p != "" {
			if !strings.HasSuffix(p, "/") {
				p += "/"
			}
			if err := CheckRel(strings.TrimSuffix(p, "/")); err != nil {
				return Location{}, Permanentf("fix the prefix in the URL", "URL %s: prefix: %w", Redact(raw), err)
			}
		}
		loc.Prefix = p
	case "":
		return Location{}, Permanentf("prefix the destination with file://, s3://, gs://, azblob:// or mem://", "URL %s has no scheme", Redact(raw))
	default:
		return Location{}, Permanentf("use file://, s3://, gs://, azblob:// or mem://", "URL scheme %q is not supported", u.Scheme)
	}
	return loc, nil
}

// SplitManifestURL recognises a URL naming a manifest object
// (".../_kdefer/manifest.json", query kept) and returns the URL of its prefix.
func SplitManifestURL(raw string) (prefixURL string, ok bool) {
	base, query, hasQuery := strings.Cut(raw, "?")
	trimmed, ok := strings.CutSuffix(base, "/"+stagecontract.ManifestKey)
	if !ok {
		return raw, false
	}
	if strings.HasSuffix(trimmed, ":/") { // s3://bucket/_kdefer/... has "s3://bucket" left
		return raw, false
	}
	if hasQuery {
		return trimmed + "/?" + query, true
	}
	return trimmed + "/", true
}

func asURLError(err error, target **url.Error) bool {
	ue, ok := err.(*url.Error)
	if ok {
		*target = ue
	}
	return ok
}

// String renders the location without credentials or query parameters (the
// query can carry secrets for some backends).
func (l Location) String() string {
	if l.Scheme == "file" {
		return "file://" + strings.TrimSuffix(l.Bucket, "/") + "/" + l.Prefix
	}
	return l.Scheme + "://" + l.Bucket + "/" + l.Prefix
}

// KeyURL renders the URL of one key under the location (no query).
func (l Location) KeyURL(key string) string {
	if l.Scheme == "file" {
		return "file://" + strings.TrimSuffix(l.Bucket, "/") + "/" + key
	}
	return l.Scheme + "://" + l.Bucket + "/" + key
}

// Redact returns raw without userinfo and without query parameters, for
// messages. It never fails: unparsable input is cut at the first '?' and '@'.
func Redact(raw string) string {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		host, path, _ := strings.Cut(rest, "/")
		if j := strings.LastIndex(host, "@"); j >= 0 {
			host = host[j+1:]
		}
		out := raw[:i+3] + host
		if strings.Contains(rest, "/") {
			out += "/" + path
		}
		return out
	}
	if j := strings.LastIndex(raw, "@"); j >= 0 {
		return raw[j+1:]
	}
	return raw
}

// OpenOptions tune a backend.
type OpenOptions struct {
	// Concurrency is the number of parallel transfers the engine will run;
	// the S3 backend sizes its connection pool to it.
	Concurrency int
	// Create makes a missing file:// directory (stage-out).
	Create bool
	// IdleTimeout fails an S3 connection that makes no progress for this
	// long (0: DefaultIdleTimeout; negative: never).
	IdleTimeout time.Duration
	// OpenTimeout gives up an open of a file:// file or directory that
	// hangs (0: DefaultOpenTimeout; see OpenFile).
	OpenTimeout time.Duration
}

// DefaultIdleTimeout is how long a transfer may stall before it is retried.
const DefaultIdleTimeout = time.Minute

// Driver opens one family of stores. Drivers live in storage/drivers and
// register themselves when that package is imported (the stage binary
// imports it in cmd/, as database/sql drivers are), so this package, the
// engines' pure logic and their fuzz targets compile without any cloud SDK.
type Driver struct {
	// Schemes are the URL schemes the driver serves.
	Schemes []string
	// Open opens the backend for loc; opts has its defaults filled in.
	Open func(ctx context.Context, loc Location, opts OpenOptions) (Backend, error)
	// Classify classes an error from the driver's SDK, with its fix; ok is
	// false for an error it does not know.
	Classify func(err error) (c Class, fix string, ok bool)
}

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
	// classifiers are the drivers' Classify functions, in registration order.
	classifiers []func(error) (Class, string, bool)
)

// Register makes d serve its schemes. It panics on a scheme registered
// twice: two drivers for one scheme is a wiring mistake, found at start-up.
func Register(d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	for _, s := range d.Schemes {
		if _, dup := drivers[s]; dup {
			panic("storage: driver for scheme " + s + " registered twice")
		}
		drivers[s] = d
	}
	if d.Classify != nil {
		classifiers = append(classifiers, d.Classify)
	}
}

// Open opens the backend for loc.
func Open(ctx context.Context, loc Location, opts OpenOptions) (Backend, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = DefaultOpenTimeout
	}
	driversMu.RLock()
	d, ok := drivers[loc.Scheme]
	driversMu.RUnlock()
	if !ok {
		return nil, Permanentf("", "URL scheme %q is not supported", loc.Scheme)
	}
	return d.Open(ctx, loc, opts)
}

// driverClass asks the registered drivers to class err.
func driverClass(err error) (Class, string, bool) {
	driversMu.RLock()
	defer driversMu.RUnlock()
	for _, c := range classifiers {
		if class, fix, ok := c(err); ok {
			return class, fix, true
		}
	}
	return 0, "", false
}

// NotExist is the error for a missing key (it wraps ErrNotExist).
func NotExist(key string) error { return fmt.Errorf("%q: %w", key, ErrNotExist) }
