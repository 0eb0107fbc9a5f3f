//go:build unix && !linux

package storage

import "golang.org/x/sys/unix"

// fdDir holds a link to each of the process's open descriptors (rootOf).
const fdDir = "/dev/fd/"

// openat2Beneath: openat2 is Linux's; elsewhere the component walk
// resolves alone.
func openat2Beneath(int, string) (int, error) { return -1, unix.ENOSYS }
