package storage

import (
	"strings"
	"testing"
)

// FuzzParseURL: ParseURL never panics; what it accepts has a prefix that is
// empty or a safe relative path ending in "/", and neither the location's
// rendering nor any error it returns carries the URL's userinfo or query
// (which can hold credentials).
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"s3://bucket/prefix/", "s3://bucket/a/b?endpoint=http://minio:9000&use_path_style=true",
		"file:///data/x", "file://localhost/x/", "gs://b", "azblob://c/p", "mem://",
		"s3://AKIA:secretkey@bucket/p?x-sig=topsecret", "s3://b/../x", "s3://b/%zz?tok=abcdefgh",
		"file://host/x", "ftp://x/y", "s3://b/p#frag", "s3:opaque", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		secrets := urlSecrets(raw)
		loc, err := ParseURL(raw)
		if err != nil {
			if ClassOf(err) != Permanent {
				t.Fatalf("ParseURL(%q) = %v, class %v; want permanent", raw, err, ClassOf(err))
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) && !inOwnWords(raw, s) {
					t.Fatalf("ParseURL(%q) error %q shows %q", raw, err, s)
				}
			}
			return
		}
		if loc.Prefix != "" {
			if !strings.HasSuffix(loc.Prefix, "/") || CheckRel(strings.TrimSuffix(loc.Prefix, "/")) != nil {
				t.Fatalf("ParseURL(%q) prefix %q", raw, loc.Prefix)
			}
		}
		for _, out := range []string{loc.String(), loc.KeyURL(loc.Prefix + "k")} {
			for _, s := range secrets {
				if strings.Contains(out, s) {
					t.Fatalf("ParseURL(%q) renders %q, showing %q", raw, out, s)
				}
			}
		}
	})
}

// FuzzRedact: Redact never panics and never returns a query, fragment or
// userinfo.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"s3://u:p@b/x?sig=1", "u:p@host", "file:///a?b#c", "a@b@c://d@e/f@g", "://@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := Redact(raw)
		if strings.ContainsAny(got, "?#") {
			t.Fatalf("Redact(%q) = %q keeps a query or fragment", raw, got)
		}
		for _, s := range urlSecrets(raw) {
			if strings.Contains(got, s) {
				t.Fatalf("Redact(%q) = %q shows %q", raw, got, s)
			}
		}
	})
}

// inOwnWords: ParseURL's error for raw with secret replaced by other
// characters still contains secret, so the error's own words do (its fix
// hint "scheme://bucket/prefix" names a userinfo "bucket"), not the URL.
func inOwnWords(raw, secret string) bool {
	other := strings.Repeat("Q", len(secret))
	if secret == other {
		other = strings.Repeat("Z", len(secret))
	}
	_, err := ParseURL(strings.ReplaceAll(raw, secret, other))
	return err != nil && strings.Contains(err.Error(), secret)
}

// urlSecrets returns the parts of raw that must never be shown: its
// userinfo and its query, when they are long enough to be told apart from
// the rest of the URL and appear nowhere else in it.
func urlSecrets(raw string) []string {
	var out []string
	base := raw
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		base = raw[:i]
		if q := raw[i+1:]; len(q) >= 6 && !strings.Contains(base, q) {
			out = append(out, q)
		}
	}
	if i := strings.Index(base, "://"); i >= 0 {
		host, _, _ := strings.Cut(base[i+3:], "/")
		if j := strings.LastIndex(host, "@"); j >= 6 {
			if ui := host[:j]; !strings.Contains(base[:i+3]+host[j:], ui) && !strings.Contains(strings.TrimPrefix(base[i+3:], host), ui) {
				out = append(out, ui)
			}
		}
	}
	return out
}
