package storage

import (
	"os"
	"syscall"
)

// OpenRegular opens name under root for reading when it is a regular file
// now, checked on the opened descriptor: what an earlier Lstat saw may have
// been swapped since. O_NONBLOCK makes the open of a FIFO return at once
// instead of waiting for a writer; it changes nothing for a regular file.
// For callers to whom anything else only means "not usable" (no error to
// report); the caller closes the file.
func OpenRegular(root *os.Root, name string) (*os.File, bool) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, false
	}
	return f, true
}
