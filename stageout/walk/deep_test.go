//go:build linux

package walk_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/kdefer/kdefer/stageout/walk"
	"github.com/kdefer/kdefer/storage"
)

// deepDirs is deep enough that the paths of its lower directories are past
// PATH_MAX (4096), and that a walk opening each directory by its path from
// the root (depth²/2 = 4.5 million component lookups) takes a hundred times
// as long as one opening it from its parent.
const deepDirs = 3000

// makeDeep makes a chain of n directories "a" under dir, each opened from
// the one above (a path this long cannot be made by name), and a file at
// the bottom.
func makeDeep(t *testing.T, dir string, n int) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := unix.Mkdirat(fd, "a", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "a", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	defer unix.Close(fd)
	f, err := unix.Openat(fd, "bottom", unix.O_CREAT|unix.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(f)
}

// walkTime walks dir and returns the shortest of three walks' times, what
// it chose and skipped.
func walkTime(t *testing.T, dir string) (time.Duration, int, map[string]string) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	filter, err := storage.NewFilter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	best := time.Duration(1 << 62)
	var chosen int
	var skipped map[string]string
	for range 3 {
		chosen, skipped = 0, map[string]string{}
		start := time.Now()
		err := walk.Walk(context.Background(), root, walk.Options{Filter: filter, Log: zerolog.Nop()}, walk.Visitor{
			File: func(walk.File) { chosen++ },
			Link: func(walk.Link) {},
			Skip: func(rel, reason string) { skipped[rel] = reason },
		})
		if err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	return best, chosen, skipped
}

// A walk costs a few system calls per entry at any depth: a chain of 3,000
// directories is walked in about the time of 3,000 directories side by
// side, not the hundreds of times as long that opening each by its path
// from the root costs (and its bottom, past PATH_MAX, is reached: the file
// there is accounted for, unsaved, its key past the stores' limit).
func TestDeepTreeWalkIsLinear(t *testing.T) {
	deep, wide := t.TempDir(), t.TempDir()
	makeDeep(t, deep, deepDirs)
	for i := range deepDirs {
		if err := os.Mkdir(filepath.Join(wide, "d"+strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(wide, "bottom"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wideTime, wideChosen, _ := walkTime(t, wide)
	deepTime, _, skipped := walkTime(t, deep)
	t.Logf("walk of %d directories: side by side %v, nested %v", deepDirs, wideTime, deepTime)
	if wideChosen != 1 {
		t.Errorf("side by side: chose %d files, want 1", wideChosen)
	}
	bottom := strings.Repeat("a/", deepDirs) + "bottom"
	if !strings.Contains(skipped[bottom], "limit is") {
		t.Errorf("the file at the bottom: skipped %q, want its key past the limit (skipped: %d entries)", skipped[bottom], len(skipped))
	}
	if limit := 10*wideTime + 100*time.Millisecond; deepTime > limit {
		t.Errorf("the nested walk took %v, more than %v: not linear in the depth", deepTime, limit)
	}
}
