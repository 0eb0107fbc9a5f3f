package stageout

import (
	"fmt"
	"path"
	"regexp"
	"strings"
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
	if p == "" {
		return glob{}, fmt.Errorf("empty glob")
	}
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); {
		switch {
		case strings.HasPrefix(p[i:], "**/"):
			b.WriteString("(?:.*/)?")
			i += 3
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(".*")
			i += 2
		case p[i] == '*':
			b.WriteString("[^/]*")
			i++
		case p[i] == '?':
			b.WriteString("[^/]")
			i++
		case p[i] == '[':
			j := strings.IndexByte(p[i+1:], ']')
			if j < 0 {
				return glob{}, fmt.Errorf("glob %q: unterminated [", p)
			}
			class := p[i+1 : i+1+j]
			if class == "" {
				return glob{}, fmt.Errorf("glob %q: empty []", p)
			}
			neg := false
			if class[0] == '!' || class[0] == '^' {
				neg, class = true, class[1:]
			}
			b.WriteString("[")
			if neg {
				b.WriteString("^/")
			}
			for _, r := range class {
				if r == '\\' || r == '[' || r == ']' {
					b.WriteString(`\`)
				}
				b.WriteRune(r)
			}
			b.WriteString("]")
			i += j + 2
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
			i++
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return glob{}, fmt.Errorf("glob %q: %w", p, err)
	}
	return glob{re: re, baseOnly: !strings.Contains(p, "/")}, nil
}
