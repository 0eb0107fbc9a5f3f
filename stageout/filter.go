package stageout

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/kdefer/kdefer/stagecontract"
)

// Filter selects files by include/exclude globs matched against the path
// relative to the stage-out directory. `*` and `?` do not cross "/", `**`
// does ("**/" also matches no directory), `[...]` is a class. A pattern
// without "/" also matches the base name, so "*.tmp" excludes temporary files
// at any depth. With includes, a file must match one; it must match no
// exclude.
type Filter struct {
	include, exclude []glob
}

type glob struct {
	re       *regexp.Regexp
	baseOnly bool
}

// NewFilter compiles the patterns.
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

func (g glob) match(rel string) bool {
	if g.re.MatchString(rel) {
		return true
	}
	return g.baseOnly && g.re.MatchString(path.Base(rel))
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
	re, err := stagecontract.CompileGlob(p)
	if err != nil {
		return glob{}, err
	}
	return glob{re: re, baseOnly: !strings.Contains(p, "/")}, nil
}
