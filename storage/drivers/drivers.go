// Package drivers holds kdefer's storage drivers: s3:// through minio-go,
// and file://, mem://, gs:// and azblob:// through gocloud.dev/blob. They
// register with package storage when this package is imported; the stage
// binary does that in cmd/, tests that talk to real stores do it too.
//
// They are apart from storage so that the storage core, the stage engines'
// pure logic and their fuzz targets build without the cloud SDKs, which are
// most of kdefer's compile time (the GCS client alone brings gRPC and
// Envoy's protocol buffers): a fuzz build instruments every package it
// compiles.
package drivers

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"

	"github.com/minio/minio-go/v7"
	"gocloud.dev/gcerrors"

	"github.com/kdefer/kdefer/storage"
)

func init() {
	storage.Register(storage.Driver{Schemes: []string{"s3"}, Open: openS3, Classify: classifyS3})
	storage.Register(storage.Driver{Schemes: []string{"file", "mem", "gs", "azblob"}, Open: openBlob, Classify: classifyBlob})
}

// permanentS3 maps S3 error codes that retrying cannot fix to their fix.
var permanentS3 = map[string]string{
	"AccessDenied":                   "grant the credentials s3:PutObject/GetObject/ListBucket/DeleteObject on the bucket and prefix",
	"AllAccessDisabled":              "re-enable access to the bucket",
	"AccountProblem":                 "fix the storage account",
	"InvalidAccessKeyId":             "set AWS_ACCESS_KEY_ID (and AWS_SECRET_ACCESS_KEY) to a valid key of this endpoint",
	"SignatureDoesNotMatch":          "set AWS_SECRET_ACCESS_KEY to the secret of AWS_ACCESS_KEY_ID",
	"ExpiredToken":                   "refresh AWS_SESSION_TOKEN",
	"InvalidToken":                   "refresh AWS_SESSION_TOKEN",
	"NoSuchBucket":                   "create the bucket or fix the bucket name in the URL",
	"InvalidBucketName":              "fix the bucket name in the URL",
	"AuthorizationHeaderMalformed":   "set region= in the URL to the bucket's region",
	"PermanentRedirect":              "set region= (and endpoint=) in the URL to the bucket's region",
	"InvalidRequest":                 "",
	"InvalidArgument":                "",
	"KeyTooLongError":                "shorten the prefix or the file paths",
	"EntityTooLarge":                 "",
	"NotImplemented":                 "use an S3 server that supports this request",
	"XMinioInvalidObjectName":        "rename the file",
	"InvalidObjectName":              "rename the file",
	"MethodNotAllowed":               "",
	"QuotaExceeded":                  "free space in the bucket or raise its quota",
	"XMinioAdminBucketQuotaExceeded": "free space in the bucket or raise its quota",
	"BadDigest":                      "",
}

// classifyS3 classes an S3 error response by its code and status.
func classifyS3(err error) (storage.Class, string, bool) {
	var we *webIdentityError
	if errors.As(err, &we) {
		return we.class, we.fix, true
	}
	var mr minio.ErrorResponse
	if errors.As(err, &mr) {
		if fix, ok := permanentS3[mr.Code]; ok {
			// BadDigest/InvalidRequest can be a corrupted transfer, but
			// a checksum mismatch on a file we read in one pass is more
			// likely a file changing under us: a retry re-reads it.
			if mr.Code == "BadDigest" {
				return storage.Transient, "", true
			}
			return storage.Permanent, fix, true
		}
		switch {
		case mr.StatusCode == http.StatusForbidden:
			return storage.Permanent, permanentS3["AccessDenied"], true
		case mr.StatusCode == http.StatusUnauthorized:
			return storage.Permanent, permanentS3["InvalidAccessKeyId"], true
		case mr.StatusCode >= 500, mr.StatusCode == http.StatusTooManyRequests,
			mr.StatusCode == http.StatusRequestTimeout, mr.StatusCode == 0:
			return storage.Transient, "", true
		case mr.StatusCode == http.StatusNotFound:
			return storage.Permanent, "", true
		}
		return storage.Transient, "", true
	}
	return 0, "", false
}

// classifyBlob classes a gocloud.dev error by its code.
func classifyBlob(err error) (storage.Class, string, bool) {
	switch gcerrors.Code(err) {
	case gcerrors.PermissionDenied:
		return storage.Permanent, "grant the credentials read/write access to the bucket", true
	case gcerrors.InvalidArgument, gcerrors.Unimplemented, gcerrors.FailedPrecondition:
		return storage.Permanent, "", true
	case gcerrors.NotFound:
		return storage.Permanent, "create the bucket or fix its name in the URL", true
	}
	return 0, "", false
}

// base64CRC is the S3 wire form (x-amz-checksum-crc32c): big-endian, base64.
func base64CRC(crc uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc)
	return base64.StdEncoding.EncodeToString(b[:])
}

// parseBase64CRC parses the S3 wire form; composite checksums ("...-N") and
// anything malformed report ok=false.
func parseBase64CRC(s string) (uint32, bool) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(b), true
}
