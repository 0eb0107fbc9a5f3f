package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"syscall"
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

// NotDirError is the error of OpenDirBeneath when a directory on the way
// to the one asked for is something else: a link, a FIFO, a device, a
// socket or a regular file.
type NotDirError struct {
	// Path is the component's path, the volume's root joined with the
	// components down to it.
	Path string
	// What it is instead, for people: "a symbolic link", "a FIFO", ...
	What string
}

func (e *NotDirError) Error() string {
	return fmt.Sprintf("%s is %s, not a directory", strconv.Quote(e.Path), e.What)
}

// NotDirFix is the fix of a NotDirError.
const NotDirFix = "make it a plain directory: kdefer follows no link and opens no special file between the work volume's root and the directory it stages"

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
	class, fix := Classify(err)
	return &Error{Class: class, Op: op, Fix: fix, Err: err}
}

// ClassOf returns the class of err (Transient for unknown errors: retrying
// an unknown failure a bounded number of times is cheaper than losing data).
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	c, _ := Classify(err)
	return c
}

// Classify returns the class of a raw error and its fix, asking the
// registered drivers about their SDKs' errors first.
func Classify(err error) (Class, string) {
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
	if class, fix, ok := driverClass(err); ok {
		return class, fix
	}
	// Local filesystem errors: a missing or unreadable file will not fix
	// itself, nor will a work volume whose way to the staged directory the
	// job's containers blocked; a full disk needs space freed.
	var nd *NotDirError
	if errors.As(err, &nd) {
		return Permanent, NotDirFix
	}
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
