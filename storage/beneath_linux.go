package storage

import "golang.org/x/sys/unix"

// fdDir holds a link to each of the process's open descriptors (rootOf).
const fdDir = "/proc/self/fd/"

// openat2Beneath opens rel under dirfd as a directory in one call: the
// kernel refuses any link (RESOLVE_NO_SYMLINKS, and /proc's magic links
// with RESOLVE_NO_MAGICLINKS) and any step out of dirfd's tree
// (RESOLVE_BENEATH), atomically with respect to renames.
func openat2Beneath(dirfd int, rel string) (int, error) {
	return unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: dirFlags,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
}
