package storage

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kdefer/kdefer/stagecontract"
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
}

func openS3(loc Location, opts OpenOptions) (Backend, error) {
	// The parameters' rule is the contract's, so admission refuses what
	// this would refuse before a pod runs; past it the values parse.
	if problem, fix := stagecontract.CheckURLQuery("s3", loc.Query); problem != "" {
		return nil, Permanentf(fix, "%s", problem)
	}
	pathStyle, _ := strconv.ParseBool(loc.Query.Get("use_path_style"))
	noTLS, _ := strconv.ParseBool(loc.Query.Get("disable_https"))
	region := loc.Query.Get("region")
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	host, secure := "s3.amazonaws.com", !noTLS
	if ep := loc.Query.Get("endpoint"); ep != "" {
		host, secure, _ = stagecontract.Endpoint(ep, noTLS)
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
		return nil, Permanentf("fix endpoint= in the URL", "open s3 client: %v", err)
	}
	return &s3Backend{core: *c, bucket: loc.Bucket}, nil
}

func (s *s3Backend) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	class, fix := classify(err)
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
	return &Error{Class: class, Op: op, Fix: fix, Err: err}
}

func (s *s3Backend) putOpts() minio.PutObjectOptions {
	return minio.PutObjectOptions{
		ContentType: "application/octet-stream",
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

func (s *s3Backend) putSmall(ctx context.Context, key string, src io.ReaderAt, size int64, progress func(int64)) (uint32, error) {
	pool := &smallPool
	if size <= tinyPutMax {
		pool = &tinyPool
	}
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	buf := (*bp)[:size]
	if _, err := io.ReadFull(io.NewSectionReader(src, 0, size), buf); err != nil {
		return 0, &Error{Class: Transient, Op: "read " + strconv.Quote(key), Err: fmt.Errorf("%w (file changed?)", err)}
	}
	crc := UpdateCRC32C(0, buf)
	opts := s.putOpts()
	opts.Checksum = 0
	opts.UserMetadata = map[string]string{"X-Amz-Checksum-Crc32c": base64CRC(crc)}
	if _, err := s.core.PutObject(ctx, s.bucket, key, bytes.NewReader(buf), size, "", "", opts); err != nil {
		return 0, s.wrap("upload "+strconv.Quote(key), err)
	}
	if progress != nil {
		progress(size)
	}
	return crc, nil
}

func (s *s3Backend) Put(ctx context.Context, key string, src io.ReaderAt, size int64, progress func(int64)) (uint32, error) {
	if size <= smallPutMax {
		return s.putSmall(ctx, key, src, size, progress)
	}
	cr := &crcReader{r: io.NewSectionReader(src, 0, size), onN: progress}
	info, err := s.core.PutObject(ctx, s.bucket, key, cr, size, "", "", s.putOpts())
	if err != nil {
		return 0, s.wrap("upload "+strconv.Quote(key), err)
	}
	if cr.n != size {
		return 0, &Error{Class: Transient, Op: "upload " + strconv.Quote(key), Err: fmt.Errorf("read %d of %d bytes (file changed?)", cr.n, size)}
	}
	if got, ok := parseBase64CRC(info.ChecksumCRC32C); ok && got != cr.crc {
		return 0, &Error{Class: Transient, Op: "upload " + strconv.Quote(key), Err: fmt.Errorf("server stored CRC32C %08x, sent %08x", got, cr.crc)}
	}
	return cr.crc, nil
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

func (s *s3Backend) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	oi, err := s.core.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{Checksum: true})
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey || minio.ToErrorResponse(err).StatusCode == http.StatusNotFound && minio.ToErrorResponse(err).Code != "NoSuchBucket" {
			return ObjectInfo{}, notExist(key)
		}
		return ObjectInfo{}, s.wrap("stat "+strconv.Quote(key), err)
	}
	crc, ok := fullObjectCRC(oi)
	return ObjectInfo{Key: key, Size: oi.Size, ModTime: oi.LastModified, CRC32C: crc, HasCRC32C: ok, MD5: etagMD5(oi)}, nil
}

func (s *s3Backend) NewReader(ctx context.Context, key string, off, length int64) (io.ReadCloser, ObjectInfo, error) {
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
			return nil, ObjectInfo{}, &Error{Class: Permanent, Err: err}
		}
	}
	body, oi, _, err := s.core.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, ObjectInfo{}, notExist(key)
		}
		return nil, ObjectInfo{}, s.wrap("download "+strconv.Quote(key), err)
	}
	info := ObjectInfo{Key: key, Size: oi.Size, ModTime: oi.LastModified}
	if whole {
		info.CRC32C, info.HasCRC32C = fullObjectCRC(oi)
		info.MD5 = etagMD5(oi)
	}
	return body, info, nil
}

func (s *s3Backend) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
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
			if err := fn(ObjectInfo{Key: o.Key, Size: o.Size, ModTime: o.LastModified}); err != nil {
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
