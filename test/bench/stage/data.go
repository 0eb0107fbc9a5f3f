package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/minio/minio-go/v7"
)

// The datasets: generated files, and counting and removing what a run left.

// generate writes incompressible files; nested directories for many files.
func generate(dir string, sh shape) {
	r := rand.New(rand.NewPCG(uint64(sh.files), uint64(sh.size)))
	buf := make([]byte, min(sh.size, 4<<20))
	// One writer and one MkdirAll a directory: at a million files (the
	// scale shape) a new 1 MiB buffer and a MkdirAll per file add up.
	w := bufio.NewWriterSize(nil, 1<<20)
	made := map[string]bool{}
	for i := range sh.files {
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%sh.dirs), fmt.Sprintf("s%02d", (i/sh.dirs)%sh.sub), fmt.Sprintf("f%05d.dat", i))
		if d := filepath.Dir(p); !made[d] {
			check(os.MkdirAll(d, 0o755))
			made[d] = true
		}
		f, err := os.Create(p)
		check(err)
		w.Reset(f)
		for left := sh.size; left > 0; {
			n := min(left, int64(len(buf)))
			for j := 0; j < int(n); j += 8 {
				v := r.Uint64()
				for k := 0; k < 8 && j+k < int(n); k++ {
					buf[j+k] = byte(v >> (8 * k))
				}
			}
			_, err := w.Write(buf[:n])
			check(err)
			left -= n
		}
		check(w.Flush())
		check(f.Close())
	}
}

func count(ctx context.Context, c *minio.Client, prefix string) int {
	n := 0
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		check(o.Err)
		n++
	}
	return n
}

func countFiles(dir string) int {
	n := 0
	check(filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	}))
	return n
}

// removePrefix deletes a prefix and purges MinIO's trash, which otherwise
// piles up (tens of GB in a benchmark).
func removePrefix(ctx context.Context, c *minio.Client, prefix, dataDir string) {
	objs := c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true})
	for e := range c.RemoveObjects(ctx, bucket, objs, minio.RemoveObjectsOptions{}) {
		check(e.Err)
	}
	trash := filepath.Join(dataDir, ".minio.sys", "tmp", ".trash")
	entries, _ := os.ReadDir(trash)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(trash, e.Name()))
	}
}
