package storage

import (
	"fmt"
	"path"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Filter selects files by include/exclude globs matched against the path
// relative to the stage directory (stage-out's source, stage-in's
// destination), one syntax for both directions: doublestar's, as rclone
// and s5cmd users write them. `*` and `?` do not cross "/", `**` as a whole
// path element does ("**/" also matches no directory), `[...]` is a class
// (`[!...]` or `[^...]` negated), `{a,b}` is either alternative, `\` escapes.
// A pattern without "/" also matches the base name, so "*.tmp" excludes
// temporary files at any depth. With includes, a file must match one; it
// must match no exclude.
type Filter struct {
	include, exclude []glob
}

type glob struct {
	pattern  string
	baseOnly bool
}

// NewFilter checks the patterns.
func NewFilter(include, exclude []string) (*Filter, error) {
	f := &Filter{}
	for _, p := range include {
		g, err := compileGlob(p)
		if err != nil {
			return nil, fmt.Errorf("include: %w", err)
		}
		f.include = append(f.include, g)
	}
	for _, p := range exclude {
		g, err := compileGlob(p)
		if err != nil {
			return nil, fmt.Errorf("exclude: %w", err)
		}
		f.exclude = append(f.exclude, g)
	}
	return f, nil
}

// Empty reports whether the filter chooses everything.
func (f *Filter) Empty() bool { return len(f.include) == 0 && len(f.exclude) == 0 }

func (g glob) match(rel string) bool {
	// Validated by compileGlob.
	if doublestar.MatchUnvalidated(g.pattern, rel) {
		return true
	}
	return g.baseOnly && doublestar.MatchUnvalidated(g.pattern, path.Base(rel))
}

// Match reports whether rel is selected.
func (f *Filter) Match(rel string) bool {
	for _, g := range f.exclude {
		if g.match(rel) {
			return false
		}
	}
	if len(f.include) == 0 {
		return true
	}
	for _, g := range f.include {
		if g.match(rel) {
			return true
		}
	}
	return false
}

func compileGlob(p string) (glob, error) {
	if p == "" {
		return glob{}, fmt.Errorf("empty glob")
	}
	if !doublestar.ValidatePattern(p) {
		return glob{}, fmt.Errorf("glob %q is malformed: unterminated [ or {, or a trailing \\", p)
	}
	return glob{pattern: p, baseOnly: !strings.Contains(p, "/")}, nil
}
