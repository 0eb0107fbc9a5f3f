package drivers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/minio/minio-go/v7"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// S3 multipart uploads: part sizing, the upload with its full-object
// CRC32C, and cleaning up what a crashed run left.

func (s *s3Backend) PartSize(size int64) int64 {
	if size <= multipartThreshold {
		return 0
	}
	ps := int64(minPartSize)
	for (size+ps-1)/ps > maxParts {
		ps *= 2
	}
	return ps
}

type s3Upload struct {
	s   *s3Backend
	key string
	id  string
}

func (s *s3Backend) Begin(ctx context.Context, key string, po storage.PutOptions) (storage.Upload, error) {
	opts := s.putOpts(po)
	if s.checksum == stagecontract.S3ChecksumCRC32C {
		opts.Checksum = 0
		// Ask for a FULL_OBJECT CRC32C: the completed object then carries
		// the same checksum a single PUT would, so resume checks and the
		// manifest use one value whatever the upload path.
		opts.UserMetadata = map[string]string{"X-Amz-Checksum-Algorithm": "CRC32C", "X-Amz-Checksum-Type": "FULL_OBJECT"}
	}
	s.abortStale(ctx, key)
	id, err := s.core.NewMultipartUpload(ctx, s.bucket, key, opts)
	if err != nil {
		return nil, s.wrap("begin multipart upload "+strconv.Quote(key), err)
	}
	return &s3Upload{s: s, key: key, id: id}, nil
}

func (u *s3Upload) PutPart(ctx context.Context, n int, src io.Reader, size int64) (storage.Part, error) {
	op := fmt.Sprintf("upload part %d of %q", n, u.key)
	popts := minio.PutObjectPartOptions{DisableContentSha256: true}
	var done func(uint32)
	switch u.s.checksum {
	case stagecontract.S3ChecksumCRC32C:
		popts.Trailer = http.Header{}
		popts.Trailer.Set("X-Amz-Checksum-Crc32c", base64CRC(0))
		done = func(c uint32) { popts.Trailer.Set("X-Amz-Checksum-Crc32c", base64CRC(c)) }
	case stagecontract.S3ChecksumMD5:
		// Content-MD5 needs a first pass: only over a part that can be
		// read again. Parts from a one-pass reader go without (the
		// manifest's CRC32C still covers them on stage-in).
		if rs, ok := src.(io.ReadSeeker); ok {
			sum, err := u.s.contentMD5(u.key, io.LimitReader(rs, size))
			if err == nil {
				_, err = rs.Seek(0, io.SeekStart)
			}
			if err != nil {
				return storage.Part{}, storage.WithOp(op, err)
			}
			popts.Md5Base64 = sum
		}
	}
	cr := &storage.CRCReader{R: src, Done: done}
	p, err := u.s.core.PutObjectPart(ctx, u.s.bucket, u.key, u.id, n, cr, size, popts)
	if err != nil {
		return storage.Part{}, u.s.wrap(op, err)
	}
	if cr.N() != size {
		return storage.Part{}, &storage.Error{Class: storage.Transient, Op: op, Err: fmt.Errorf("read %d of %d bytes (file changed?)", cr.N(), size)}
	}
	return storage.Part{N: n, ETag: p.ETag, Size: size, CRC: cr.CRC()}, nil
}

func (u *s3Upload) Complete(ctx context.Context, parts []storage.Part, crc uint32) error {
	withCRC := u.s.checksum == stagecontract.S3ChecksumCRC32C
	cps := make([]minio.CompletePart, len(parts))
	for i, p := range parts {
		cps[i] = minio.CompletePart{PartNumber: p.N, ETag: p.ETag}
		if withCRC {
			cps[i].ChecksumCRC32C = base64CRC(p.CRC)
		}
	}
	opts := u.s.putOpts(storage.PutOptions{})
	if withCRC {
		opts.Checksum = 0
		opts.UserMetadata = map[string]string{"X-Amz-Checksum-Crc32c": base64CRC(crc), "X-Amz-Checksum-Type": "FULL_OBJECT"}
	}
	_, err := u.s.core.CompleteMultipartUpload(ctx, u.s.bucket, u.key, u.id, cps, opts)
	if err != nil && minio.ToErrorResponse(err).Code == "NoSuchUpload" {
		// A retry after a Complete whose response was lost: the upload is
		// gone because it completed. Accept it if the object is the one
		// these parts make.
		var size int64
		for _, p := range parts {
			size += p.Size
		}
		// Without a stored CRC32C (checksum=md5 or none) the size is all
		// there is to compare. A look that fails tells nothing: its
		// error (not NoSuchUpload's, a 404 and so permanent) lets the
		// caller's retry complete and look again.
		oi, serr := u.s.Stat(ctx, u.key)
		switch {
		case serr == nil && oi.Size == size && (oi.HasCRC32C && oi.CRC32C == crc || !withCRC):
			return nil
		case serr != nil && !errors.Is(serr, storage.ErrNotExist):
			return serr
		}
	}
	return u.s.wrap("complete multipart upload "+strconv.Quote(u.key), err)
}

func (u *s3Upload) Abort(ctx context.Context) error {
	return u.s.wrap("abort multipart upload "+strconv.Quote(u.key), u.s.core.AbortMultipartUpload(ctx, u.s.bucket, u.key, u.id))
}

// abortStale aborts multipart uploads of key left by an earlier run that
// crashed or was killed: their parts cost storage until a lifecycle rule
// removes them, and this run is about to upload the object anyway. Best
// effort: a store that refuses the listing (no s3:ListBucketMultipartUploads)
// just keeps them.
func (s *s3Backend) abortStale(ctx context.Context, key string) {
	res, err := s.core.ListMultipartUploads(ctx, s.bucket, key, "", "", "", 100)
	if err != nil {
		return
	}
	for _, u := range res.Uploads {
		if u.Key == key {
			_ = s.core.AbortMultipartUpload(ctx, s.bucket, key, u.UploadID)
		}
	}
}
