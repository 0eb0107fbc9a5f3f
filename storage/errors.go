package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/minio/minio-go/v7"
	"gocloud.dev/gcerrors"
)

// Class says what retrying can do about an error.
type Class int

const (
	// Transient errors may go away by themselves: network trouble, 5xx,
	// throttling, timeouts. They are retried, and if they persist the CLI
	// exits 1 so the kubelet restarts the step.
	Transient Class = iota
	// Permanent errors need a human: bad credentials, missing bucket,
	// malformed URL, permission, hostile keys. The CLI exits 3 at once.
	Permanent
	// Usage errors are bad flags or arguments (exit 2).
	Usage
)

func (c Class) String() string {
	switch c {
	case Permanent:
		return "permanent"
	case Usage:
		return "usage"
	default:
		return "transient"
	}
}

// ErrNotExist is returned (wrapped) by Backend.Stat and NewReader when the
// object does not exist.
var ErrNotExist = errors.New("object does not exist")

// Error is an error with a class and, for permanent errors, the fix.
type Error struct {
	Class Class
	// Op says what was being done, e.g. `upload "a/b.dat"`.
	Op string
	// Fix tells the user what to change; empty when there is nothing to say.
	Fix string
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	if e.Fix != "" {
		b.WriteString(" (fix: ")
		b.WriteString(e.Fix)
		b.WriteString(")")
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// UnreadableFix is the fix of an output file stage-out may not read.
const UnreadableFix = "set securityContext.runAsUser on the Job's containers — kdefer's stage-out then runs as the same user — or write outputs readable by others"

// Unreadable returns err, a permission error met doing op on a file, as a
// permanent error that names the user and groups the step runs as and the
// fix; other errors are returned as WithOp returns them.
func Unreadable(op string, uid, gid int, err error) error {
	if !errors.Is(err, fs.ErrPermission) {
		return WithOp(op, err)
	}
	return &Error{Class: Permanent, Op: op, Fix: UnreadableFix,
		Err: fmt.Errorf("%w (stage-out runs as uid %d, gid %d)", err, uid, gid)}
}

// Permanentf builds a permanent error with a fix.
func Permanentf(fix, format string, args ...any) error {
	return &Error{Class: Permanent, Fix: fix, Err: fmt.Errorf(format, args...)}
}

// Usagef builds a usage error.
func Usagef(format string, args ...any) error {
	return &Error{Class: Usage, Err: fmt.Errorf(format, args...)}
}

// WithOp returns err annotated with op, classified if it was not yet.
func WithOp(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		// Wrap, keeping the original in the chain (errors.Is) and its fix
		// printed once.
		return &Error{Class: e.Class, Op: op, Err: err}
	}
	class, fix := classify(err)
	return &Error{Class: class, Op: op, Fix: fix, Err: err}
}

// ClassOf returns the class of err (Transient for unknown errors: retrying
// an unknown failure a bounded number of times is cheaper than losing data).
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	c, _ := classify(err)
	return c
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

func classify(err error) (Class, string) {
	if err == nil {
		return Transient, ""
	}
	if errors.Is(err, ErrNotExist) {
		return Permanent, ""
	}
	if errors.Is(err, context.Canceled) {
		return Permanent, ""
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Transient, ""
	}
	var mr minio.ErrorResponse
	if errors.As(err, &mr) {
		if fix, ok := permanentS3[mr.Code]; ok {
			// BadDigest/InvalidRequest can be a corrupted transfer, but
			// a checksum mismatch on a file we read in one pass is more
			// likely a file changing under us: a retry re-reads it.
			if mr.Code == "BadDigest" {
				return Transient, ""
			}
			return Permanent, fix
		}
		switch {
		case mr.StatusCode == http.StatusForbidden:
			return Permanent, permanentS3["AccessDenied"]
		case mr.StatusCode == http.StatusUnauthorized:
			return Permanent, permanentS3["InvalidAccessKeyId"]
		case mr.StatusCode >= 500, mr.StatusCode == http.StatusTooManyRequests,
			mr.StatusCode == http.StatusRequestTimeout, mr.StatusCode == 0:
			return Transient, ""
		case mr.StatusCode == http.StatusNotFound:
			return Permanent, ""
		}
		return Transient, ""
	}
	switch gcerrors.Code(err) {
	case gcerrors.PermissionDenied:
		return Permanent, "grant the credentials read/write access to the bucket"
	case gcerrors.InvalidArgument, gcerrors.Unimplemented, gcerrors.FailedPrecondition:
		return Permanent, ""
	case gcerrors.NotFound:
		return Permanent, "create the bucket or fix its name in the URL"
	}
	// Local filesystem errors: a missing or unreadable file will not fix
	// itself; a full disk needs space freed.
	if errors.Is(err, fs.ErrPermission) {
		return Permanent, "make the files readable by the stage step's user"
	}
	if errors.Is(err, syscall.ENOSPC) {
		return Permanent, "free space on the volume or make it larger"
	}
	if errors.Is(err, syscall.EROFS) {
		return Permanent, "mount the volume read-write"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) {
		return Permanent, ""
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) {
		return Transient, ""
	}
	return Transient, ""
}
