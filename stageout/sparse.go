package stageout

import (
	"fmt"
	"io/fs"
	"os"
)

// maxHoles is how many bytes of holes a file may have and still be stored.
// A variable so tests need not write gigabytes.
var maxHoles int64 = 1 << 30

// sparseReason returns why f (opened, with info from its fstat) is not
// stored, or "" to store it. A sparse file whose holes exceed maxHoles is
// refused: uploading it reads and sends every hole as zeros (a 50 GiB file
// of a few blocks would move 50 GiB), and storing only its data extents
// would need a manifest format and a stage-in that restore holes, which
// the stage contract does not have. Smaller holes are uploaded as the zeros
// they read as, which is exact and costs little.
//
// The allocated size (st_blocks) only nominates a file: compressing
// filesystems allocate less than they hold. The holes are then measured
// with SEEK_DATA/SEEK_HOLE, which count compressed data as data.
func sparseReason(f *os.File, info fs.FileInfo) string {
	if allocated(info)+maxHoles >= info.Size() {
		return ""
	}
	holes, err := holeBytes(f, info.Size())
	if err != nil {
		holes = info.Size() - allocated(info) // no SEEK_HOLE: trust the blocks
	}
	if holes <= maxHoles {
		return ""
	}
	return fmt.Sprintf("sparse file: %d of its %d bytes are holes, more than the %d uploaded as zeros", holes, info.Size(), maxHoles)
}

// holeBytes sums the holes of f's first size bytes, walking its data
// extents with SEEK_DATA and SEEK_HOLE.
func holeBytes(f *os.File, size int64) (int64, error) {
	var data int64
	for off := int64(0); off < size; {
		start, err := f.Seek(off, seekData)
		if err != nil {
			if isNoData(err) { // no data after off: the rest is a hole
				break
			}
			return 0, err
		}
		if start >= size {
			break
		}
		end, err := f.Seek(start, seekHole)
		if err != nil {
			return 0, err
		}
		end = min(end, size)
		data += end - start
		off = end
	}
	return size - data, nil
}
