package stagecontract

import (
	"fmt"
	"regexp"
	"strings"
)

// CompileGlob compiles an include/exclude glob into the regular expression
// kdefer-stage matches paths relative to the stage-out directory with: `*`
// and `?` do not cross "/", `**` does ("**/" also matches no directory),
// `[...]` is a class (`[!...]` or `[^...]` negated). It is the one rule for
// globs: kdefer-stage compiles with it, and the controller (and `kdefer
// lint`) refuse what it refuses before a pod runs.
func CompileGlob(p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, fmt.Errorf("empty glob")
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
				return nil, fmt.Errorf("glob %q: unterminated [", p)
			}
			class := p[i+1 : i+1+j]
			if class == "" {
				return nil, fmt.Errorf("glob %q: empty []", p)
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
		return nil, fmt.Errorf("glob %q: %w", p, err)
	}
	return re, nil
}
