package storage

import (
	"fmt"
	"strings"

	"github.com/kdefer/kdefer/stagecontract"
)

// ExpandTemplate replaces {namespace} {job} {pod} {index} {trigger} {uid}
// {node} in s with values from lookup (os.LookupEnv in the CLI). An unknown
// placeholder, an unset variable or a value that is not a single plain path
// segment is an error: a template must never expand into another
// directory, a query parameter or an empty segment that merges two runs.
func ExpandTemplate(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for {
		i := strings.IndexAny(s, "{}")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if s[i] == '}' {
			return "", fmt.Errorf("template has an unmatched '}'")
		}
		b.WriteString(s[:i])
		j := strings.IndexAny(s[i+1:], "{}")
		if j < 0 || s[i+1+j] != '}' {
			return "", fmt.Errorf("template has an unterminated '{'")
		}
		name := s[i+1 : i+1+j]
		env, ok := stagecontract.PlaceholderEnv[name]
		if !ok {
			return "", fmt.Errorf("template placeholder {%s} is unknown (known: {namespace} {job} {pod} {index} {trigger} {uid} {node})", name)
		}
		v, ok := lookup(env)
		if !ok || v == "" {
			return "", fmt.Errorf("template placeholder {%s} needs %s, which is not set", name, env)
		}
		if err := checkTemplateValue(v); err != nil {
			return "", fmt.Errorf("template placeholder {%s}: %s %w", name, env, err)
		}
		b.WriteString(v)
		s = s[i+1+j+1:]
	}
}

func checkTemplateValue(v string) error {
	if v == "." || v == ".." {
		return fmt.Errorf("is %q", v)
	}
	for _, r := range v {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return fmt.Errorf("has character %q (allowed: letters, digits, - _ .)", r)
		}
	}
	return nil
}
