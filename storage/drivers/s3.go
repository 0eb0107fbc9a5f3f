package drivers

import (
	"bytes"
	"cmp"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// Part sizing: objects above multipartThreshold are uploaded in parts of at
// least minPartSize, scheduled on the shared workers so a few big files
// still use every connection. Parts stream from the file, so part size costs
// no memory; it only trades request count against parallelism.
const (
	multipartThreshold = 64 << 20
	minPartSize        = 16 << 20
	maxParts           = 10000
)

type s3Backend struct {
	core   minio.Core
	bucket string
	// checksum is the upload checksum mode (stagecontract.S3Checksums).
	checksum string
}

func openS3(_ context.Context, loc storage.Location, opts storage.OpenOptions) (storage.Backend, error) {
	cfg, err := resolveS3Config(loc.Query)
	if err != nil {
		return nil, err
	}
	// minio-go checks the bucket name on the client, per request, with a
	// plain error that classifies as transient: a bad name was retried until
	// the deadline. Refuse it once, here, as what it is.
	if err := s3utils.CheckValidBucketName(loc.Bucket); err != nil {
		return nil, storage.Permanentf("fix the bucket name in the URL (3 to 63 characters: letters, digits, dots, hyphens)",
			"s3 bucket %q: %v", loc.Bucket, err)
	}
	tr, err := cfg.transport(opts)
	if err != nil {
		return nil, err
	}
	c, err := minio.NewCore(cfg.host, &minio.Options{
		Creds:        cfg.credentials(tr),
		Secure:       cfg.secure,
		Region:       cfg.region,
		BucketLookup: cfg.lookup,
		Transport:    tr,
		// Trailing checksums let the server verify a CRC32C computed while
		// the body streams, with no second pass and no SigV4 payload hash.
		// Off in the other modes: servers that reject aws-chunked
		// trailers are why they exist.
		TrailingHeaders: cfg.checksum == stagecontract.S3ChecksumCRC32C,
		// kdefer retries with its own jittered policy, which re-reads the
		// file; minio-go's retries would multiply with it.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, storage.Permanentf("fix endpoint= in the URL", "open s3 client: %v", err)
	}
	return &s3Backend{core: *c, bucket: loc.Bucket, checksum: cfg.checksum}, nil
}

func (s *s3Backend) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	class, fix := storage.Classify(err)
	var mr minio.ErrorResponse
	if errors.As(err, &mr) {
		msg := mr.Message
		if msg == "" {
			msg = http.StatusText(mr.StatusCode)
		}
		err = fmt.Errorf("%s (%s, HTTP %d)", msg, mr.Code, mr.StatusCode)
		if mr.Code == "NoSuchBucket" {
			err = fmt.Errorf("bucket %q does not exist (NoSuchBucket)", s.bucket)
		}
	}
	return &storage.Error{Class: class, Op: op, Fix: fix, Err: err}
}

func (s *s3Backend) putOpts(o storage.PutOptions) minio.PutObjectOptions {
	opts := minio.PutObjectOptions{
		ContentType: cmp.Or(o.ContentType, storage.DefaultContentType),
		// No SigV4 payload hash (UNSIGNED-PAYLOAD): it halves client CPU
		// (measured 1.4 vs 3.0 CPU-s/GB); integrity comes from the
		// checksum the server verifies (the CRC32C trailer, or
		// Content-MD5).
		DisableContentSha256: true,
	}
	if s.checksum == stagecontract.S3ChecksumCRC32C {
		opts.Checksum = minio.ChecksumFullObjectCRC32C
	}
	return opts
}

// contentMD5 is the Content-MD5 of size bytes of src in checksum=md5 mode,
// read before the body is sent (the header comes first); "" in the other
// modes.
func (s *s3Backend) contentMD5(key string, src io.Reader) (string, error) {
	if s.checksum != stagecontract.S3ChecksumMD5 {
		return "", nil
	}
	h := md5.New()
	if _, err := storage.CopyBuffer(h, src); err != nil {
		return "", &storage.Error{Class: storage.Transient, Op: "read " + strconv.Quote(key), Err: err}
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil)), nil
}

// smallPutMax: files up to this size are read once into a pooled buffer,
// their CRC32C computed in that same read, and sent with the checksum as a
// plain header and a plain body. For small objects the aws-chunked trailer
// encoding costs more than the data (client and server CPU per request);
// buffers come from two size classes and a worker holds one at a time, so
// the memory is bounded by concurrency * 1 MiB, and by concurrency * 64 KiB
// for trees of small files.
const (
	smallPutMax = 1 << 20
	tinyPutMax  = 64 << 10
)

var (
	smallPool = sync.Pool{New: func() any { b := make([]byte, smallPutMax); return &b }}
	tinyPool  = sync.Pool{New: func() any { b := make([]byte, tinyPutMax); return &b }}
)

func (s *s3Backend) putSmall(ctx context.Context, key string, src io.ReaderAt, size int64, o storage.PutOptions) (uint32, error) {
	pool := &smallPool
	if size <= tinyPutMax {
		pool = &tinyPool
	}
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	buf := (*bp)[:size]
	if _, err := io.ReadFull(io.NewSectionReader(src, 0, size), buf); err != nil {
		return 0, &storage.Error{Class: storage.Transient, Op: "read " + strconv.Quote(key), Err: fmt.Errorf("%w (file changed?)", err)}
	}
	crc := storage.UpdateCRC32C(0, buf)
	opts := s.putOpts(o)
	if s.checksum == stagecontract.S3ChecksumCRC32C {
		opts.Checksum = 0
		opts.UserMetadata = map[string]string{"X-Amz-Checksum-Crc32c": base64CRC(crc)}
	}
	md5sum, err := s.contentMD5(key, bytes.NewReader(buf))
	if err != nil {
		return 0, err
	}
	if _, err := s.core.PutObject(ctx, s.bucket, key, bytes.NewReader(buf), size, md5sum, "", opts); err != nil {
		return 0, s.wrap("upload "+strconv.Quote(key), err)
	}
	if o.Progress != nil {
		o.Progress(size)
	}
	return crc, nil
}

func (s *s3Backend) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts storage.PutOptions) (uint32, error) {
	if size <= smallPutMax {
		return s.putSmall(ctx, key, src, size, opts)
	}
	md5sum, err := s.contentMD5(key, io.NewSectionReader(src, 0, size))
	if err != nil {
		return 0, err
	}
	cr := &storage.CRCReader{R: io.NewSectionReader(src, 0, size), OnN: opts.Progress}
	info, err := s.core.PutObject(ctx, s.bucket, key, cr, size, md5sum, "", s.putOpts(opts))
	if err != nil {
		return 0, s.wrap("upload "+strconv.Quote(key), err)
	}
	if cr.N() != size {
		return 0, &storage.Error{Class: storage.Transient, Op: "upload " + strconv.Quote(key), Err: fmt.Errorf("read %d of %d bytes (file changed?)", cr.N(), size)}
	}
	if got, ok := parseBase64CRC(info.ChecksumCRC32C); ok && got != cr.CRC() {
		return 0, &storage.Error{Class: storage.Transient, Op: "upload " + strconv.Quote(key), Err: fmt.Errorf("server stored CRC32C %08x, sent %08x", got, cr.CRC())}
	}
	return cr.CRC(), nil
}

func fullObjectCRC(oi minio.ObjectInfo) (uint32, bool) {
	// Composite (per-part) checksums are "<base64>-N" and do not parse.
	if oi.ChecksumMode != "" && !strings.EqualFold(oi.ChecksumMode, "FULL_OBJECT") {
		return 0, false
	}
	return parseBase64CRC(oi.ChecksumCRC32C)
}

// etagMD5 returns the MD5 an object's ETag is, or nil. Only a single-part
// object's ETag (32 hex digits; a multipart one ends in "-N") stored
// without SSE-KMS or SSE-C (whose ETags are opaque) is the MD5 of its data.
func etagMD5(oi minio.ObjectInfo) []byte {
	etag := strings.Trim(oi.ETag, `"`)
	if len(etag) != 32 || strings.HasPrefix(oi.Metadata.Get("X-Amz-Server-Side-Encryption"), "aws:kms") ||
		oi.Metadata.Get("X-Amz-Server-Side-Encryption-Customer-Algorithm") != "" {
		return nil
	}
	b, err := hex.DecodeString(etag)
	if err != nil {
		return nil
	}
	return b
}

func (s *s3Backend) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	oi, err := s.core.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{Checksum: true})
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey || minio.ToErrorResponse(err).StatusCode == http.StatusNotFound && minio.ToErrorResponse(err).Code != "NoSuchBucket" {
			return storage.ObjectInfo{}, storage.NotExist(key)
		}
		return storage.ObjectInfo{}, s.wrap("stat "+strconv.Quote(key), err)
	}
	crc, ok := fullObjectCRC(oi)
	return storage.ObjectInfo{Key: key, Size: oi.Size, ModTime: oi.LastModified, CRC32C: crc, HasCRC32C: ok, MD5: etagMD5(oi)}, nil
}

func (s *s3Backend) NewReader(ctx context.Context, key string, off, length int64) (io.ReadCloser, storage.ObjectInfo, error) {
	opts := minio.GetObjectOptions{}
	whole := off == 0 && length < 0
	if whole {
		// The header, not opts.Checksum: that also wraps the body in
		// minio-go's own CRC32C check, a second hash of every byte the
		// stage engines already hash and verify (with their own error
		// classes).
		opts.Set("x-amz-checksum-mode", "ENABLED")
	} else {
		end := int64(-1)
		if length >= 0 {
			end = off + length - 1
		}
		var err error
		if end >= 0 {
			err = opts.SetRange(off, end)
		} else {
			err = opts.SetRange(off, 0)
		}
		if err != nil {
			return nil, storage.ObjectInfo{}, &storage.Error{Class: storage.Permanent, Err: err}
		}
	}
	body, oi, _, err := s.core.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, storage.ObjectInfo{}, storage.NotExist(key)
		}
		return nil, storage.ObjectInfo{}, s.wrap("download "+strconv.Quote(key), err)
	}
	info := storage.ObjectInfo{Key: key, Size: oi.Size, ModTime: oi.LastModified}
	if whole {
		info.CRC32C, info.HasCRC32C = fullObjectCRC(oi)
		info.MD5 = etagMD5(oi)
	}
	return body, info, nil
}

func (s *s3Backend) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	// Client.ListObjects, not Core.ListObjectsV2: only it takes the
	// context, so a cancelled run stops listing (issue #12). No owner: it
	// costs the server a lookup per key and is never used.
	noOwner := false
	for o := range s.core.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true, FetchOwner: &noOwner, MaxKeys: 1000}) {
		if o.Err != nil {
			return s.wrap("list "+strconv.Quote(prefix), o.Err)
		}
		if strings.HasSuffix(o.Key, "/") && o.Size == 0 {
			continue // directory marker
		}
		if err := fn(storage.ObjectInfo{Key: o.Key, Size: o.Size, ModTime: o.LastModified}); err != nil {
			return err
		}
	}
	// The iterator ends without an error when the context is done.
	if err := ctx.Err(); err != nil {
		return s.wrap("list "+strconv.Quote(prefix), err)
	}
	return nil
}

func (s *s3Backend) Delete(ctx context.Context, key string) error {
	err := s.core.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return s.wrap("delete "+strconv.Quote(key), err)
	}
	return nil
}

func (s *s3Backend) Close() error { return nil }
