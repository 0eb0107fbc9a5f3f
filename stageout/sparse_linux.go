//go:build linux

package stageout

import (
	"errors"
	"io/fs"
	"syscall"
)

// lseek whences for data extents (Linux 3.1+).
const (
	seekData = 3 // SEEK_DATA
	seekHole = 4 // SEEK_HOLE
)

func isNoData(err error) bool { return errors.Is(err, syscall.ENXIO) }

// allocated is the space the file occupies on disk.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
