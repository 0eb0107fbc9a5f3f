package drivers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kdefer/kdefer/storage"
)

// s3Params are the URL parameters the s3:// backend accepts; any other is
// refused with its name, so a typo cannot silently fall back to AWS.
var s3Params = map[string]bool{"endpoint": true, "region": true, "use_path_style": true, "disable_https": true}

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
}

func openS3(_ context.Context, loc storage.Location, opts storage.OpenOptions) (storage.Backend, error) {
	for k := range loc.Query {
		if !s3Params[k] {
			return nil, storage.Permanentf("remove it; s3:// accepts endpoint, region, use_path_style, disable_https",
				"s3 URL parameter %q is unknown", k)
		}
	}
	boolParam := func(name string) (bool, error) {
		v := loc.Query.Get(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, storage.Permanentf("use "+name+"=true or false", "s3 URL parameter %s=%q is not a boolean", name, v)
		}
		return b, nil
	}
	pathStyle, err := boolParam("use_path_style")
	if err != nil {
		return nil, err
	}
	noTLS, err := boolParam("disable_https")
	if err != nil {
		return nil, err
	}
	region := loc.Query.Get("region")
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	host, secure := "s3.amazonaws.com", !noTLS
	if ep := loc.Query.Get("endpoint"); ep != "" {
		if !strings.Contains(ep, "://") {
			ep = "https://" + ep
			if noTLS {
				ep = "http://" + strings.TrimPrefix(ep, "https://")
			}
		}
		eu, err := url.Parse(ep)
		if err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") || (eu.Path != "" && eu.Path != "/") || eu.User != nil {
			return nil, storage.Permanentf("use endpoint=http://host:port or endpoint=https://host", "s3 URL parameter endpoint=%q is not a URL of the form scheme://host[:port]", storage.Redact(ep))
		}
		host, secure = eu.Host, eu.Scheme == "https"
		if region == "" {
			region = "us-east-1" // S3-compatible servers (MinIO, Ceph) default to it
		}
	}
	lookup := minio.BucketLookupAuto
	if pathStyle {
		lookup = minio.BucketLookupPath
	}
	// Credentials only from the standard AWS sources, in the AWS order:
	// environment, shared credentials file (AWS_PROFILE), then the pod's
	// web identity / instance role. MinIO's own env names are accepted too.
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.EnvMinio{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{},
	})
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           idleDialer(opts.IdleTimeout),
		MaxIdleConns:          2 * opts.Concurrency,
		MaxIdleConnsPerHost:   2 * opts.Concurrency,
		IdleConnTimeout:       30 * time.Second, // below the idle timeout
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		ExpectContinueTimeout: time.Second,
		// Object data is already compressed or incompressible; gzip would
		// only cost CPU. 64 KiB socket buffers cut syscalls for large bodies.
		DisableCompression: true,
		WriteBufferSize:    64 << 10,
		ReadBufferSize:     64 << 10,
	}
	if secure {
		tr.ForceAttemptHTTP2 = false
	}
	c, err := minio.NewCore(host, &minio.Options{
		Creds:        creds,
		Secure:       secure,
		Region:       region,
		BucketLookup: lookup,
		Transport:    tr,
		// Trailing checksums let the server verify a CRC32C computed while
		// the body streams, with no second pass and no SigV4 payload hash.
		TrailingHeaders: true,
		// kdefer retries with its own jittered policy, which re-reads the
		// file; minio-go's retries would multiply with it.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, storage.Permanentf("fix endpoint= in the URL", "open s3 client: %v", err)
	}
	return &s3Backend{core: *c, bucket: loc.Bucket}, nil
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
	return minio.PutObjectOptions{
		ContentType: cmp.Or(o.ContentType, storage.DefaultContentType),
		// No SigV4 payload hash (UNSIGNED-PAYLOAD + CRC32C trailer): it halves
		// client CPU (measured 1.4 vs 3.0 CPU-s/GB); integrity comes from the
		// CRC32C the server verifies.
		DisableContentSha256: true,
		Checksum:             minio.ChecksumFullObjectCRC32C,
	}
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
	opts.Checksum = 0
	opts.UserMetadata = map[string]string{"X-Amz-Checksum-Crc32c": base64CRC(crc)}
	if _, err := s.core.PutObject(ctx, s.bucket, key, bytes.NewReader(buf), size, "", "", opts); err != nil {
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
	cr := &storage.CRCReader{R: io.NewSectionReader(src, 0, size), OnN: opts.Progress}
	info, err := s.core.PutObject(ctx, s.bucket, key, cr, size, "", "", s.putOpts(opts))
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
		opts.Checksum = true
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
	token := ""
	for {
		res, err := s.core.ListObjectsV2(s.bucket, prefix, "", token, "", 1000)
		if err != nil {
			return s.wrap("list "+strconv.Quote(prefix), err)
		}
		for _, o := range res.Contents {
			if strings.HasSuffix(o.Key, "/") && o.Size == 0 {
				continue // directory marker
			}
			if err := fn(storage.ObjectInfo{Key: o.Key, Size: o.Size, ModTime: o.LastModified}); err != nil {
				return err
			}
		}
		if !res.IsTruncated || res.NextContinuationToken == "" {
			return nil
		}
		token = res.NextContinuationToken
	}
}

func (s *s3Backend) Delete(ctx context.Context, key string) error {
	err := s.core.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return s.wrap("delete "+strconv.Quote(key), err)
	}
	return nil
}

func (s *s3Backend) Close() error { return nil }
