package v1alpha1

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/kdefer/kdefer/stagecontract"
)

// The value rules that annotations and DeferPolicies share: stage URLs,
// paths relative to the work volume, mount paths and globs. Each rule is
// written once, here, and returns a problem in words, or "".

// CheckStageURL returns a problem with a stage URL template, or "". Stage-in
// URLs may not use {trigger}: no trigger exists before the main containers
// run. mem:// is refused: it stores nothing outside the stage process.
// file:// is well-formed here; whether a cluster allows it is
// ValidateFileURLs' rule.
func CheckStageURL(v string, stageIn bool) string {
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		return fmt.Sprintf("%q is not a URL (no scheme)", v)
	}
	if scheme == "mem" {
		// Reported as success by kdefer-stage, then the volume would be
		// released: every output lost.
		return fmt.Sprintf("%q is in the memory of the stage step, which nothing outlives, so nothing would be saved (mem:// is for kdefer-stage's tests); use s3://, gs:// or azblob://", v)
	}
	known := false
	for _, s := range stagecontract.URLSchemes {
		known = known || s == scheme
	}
	if !known {
		usable := slices.DeleteFunc(slices.Clone(stagecontract.URLSchemes), func(s string) bool { return s == "mem" })
		return fmt.Sprintf("%q has scheme %q; kdefer understands %s", v, scheme, strings.Join(usable, ", "))
	}
	if len(v) > 2048 {
		return "is longer than 2048 characters"
	}
	// Placeholders: known names, balanced braces, and only in the path.
	hostEnd := strings.IndexAny(rest, "/?#")
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	q := strings.IndexAny(rest, "?#")
	if strings.ContainsAny(rest[:hostEnd], "{}") || (q >= 0 && strings.ContainsAny(rest[q:], "{}")) {
		return fmt.Sprintf("%q has placeholders outside the path", v)
	}
	s := rest
	var stripped strings.Builder
	for {
		i := strings.IndexAny(s, "{}")
		if i < 0 {
			stripped.WriteString(s)
			break
		}
		if s[i] == '}' {
			return fmt.Sprintf("%q has an unmatched '}'", v)
		}
		stripped.WriteString(s[:i])
		j := strings.IndexAny(s[i+1:], "{}")
		if j < 0 || s[i+1+j] != '}' {
			return fmt.Sprintf("%q has an unterminated '{'", v)
		}
		name := s[i+1 : i+1+j]
		found := false
		for _, p := range stagecontract.URLPlaceholders {
			found = found || p == name
		}
		if !found {
			return fmt.Sprintf("%q uses placeholder {%s}; known placeholders are {%s}", v, name, strings.Join(stagecontract.URLPlaceholders, "} {"))
		}
		if stageIn && name == "trigger" {
			return fmt.Sprintf("%q uses {trigger}, which is unknown before the main containers run", v)
		}
		stripped.WriteString("x")
		s = s[i+1+j+1:]
	}
	u, err := url.Parse(scheme + "://" + stripped.String())
	if err != nil {
		return fmt.Sprintf("%q is not a valid URL: %v", v, err)
	}
	switch scheme {
	case "file":
		if u.Path == "" || u.Path == "/" {
			return fmt.Sprintf("%q names no directory", v)
		}
	default:
		if u.Host == "" {
			return fmt.Sprintf("%q names no bucket", v)
		}
	}
	if u.User != nil {
		return fmt.Sprintf("%q holds credentials in the URL; put them in the Secret named by %s", redactUser(v), AnnotationCredentials)
	}
	if problem, fix := stagecontract.CheckURLQuery(scheme, u.Query()); problem != "" {
		base, _, _ := strings.Cut(v, "?") // the query may hold an endpoint's secrets
		return fmt.Sprintf("%q: %s (%s)", base+"?...", problem, fix)
	}
	return ""
}

func redactUser(v string) string {
	scheme, rest, _ := strings.Cut(v, "://")
	if i := strings.Index(rest, "@"); i >= 0 {
		rest = "***" + rest[i:]
	}
	return scheme + "://" + rest
}

// CheckRelativePath returns a problem with a path relative to the work
// volume, or "".
func CheckRelativePath(v string) string {
	if strings.HasPrefix(v, "/") {
		return fmt.Sprintf("%q is absolute; it must be relative to the work volume", v)
	}
	if hasDotDot(v) {
		return fmt.Sprintf("%q contains '..'", v)
	}
	if len(v) > 1024 {
		return "is longer than 1024 characters"
	}
	return ""
}

// IsMountPath reports whether v can be where the work volume is mounted in
// the main containers and the user's defer containers: absolute, without
// '..' or ':' (the rule of both the annotation and the policy field
// workVolume.mountPath). kdefer's stage steps mount the volume at a path
// of their own whatever v is, so no v puts the volume inside or around
// their mounts.
func IsMountPath(v string) bool {
	return strings.HasPrefix(v, "/") && !strings.Contains(v, ":") && !hasDotDot(v)
}

// CheckGlob returns a problem with an include/exclude glob, or "".
func CheckGlob(g string) string {
	if g == "" {
		return "holds an empty glob"
	}
	if strings.HasPrefix(g, "/") {
		return fmt.Sprintf("glob %q is absolute; globs are relative to the stage-out path", g)
	}
	// The library kdefer-stage matches with (storage.Filter), so what is
	// admitted is what the stage step accepts.
	if !doublestar.ValidatePattern(g) {
		return fmt.Sprintf("glob %q is malformed: close every [ and {, and escape a trailing \\", g)
	}
	return ""
}

func hasDotDot(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if s == ".." {
			return true
		}
	}
	return false
}

// StageOutCollision returns why pods would share the stage-out prefix a
// template expands to, or "" when every pod attempt gets its own. Only
// {pod} and {uid} name one attempt: the Job controller gives every pod it
// creates (a retry after a failure within backoffLimit or
// backoffLimitPerIndex, a replacement of an evicted pod) a new name and
// UID, while {job}, {index} and the rest repeat across attempts, across an
// index's retries and across re-runs of a Job with the same name. kdefer-stage
// refuses a prefix whose manifest a different pod wrote unless the policy
// sets stageOut.overwrite, so a colliding template fails later attempts
// instead of silently replacing earlier outputs.
func StageOutCollision(url string) string {
	if strings.Contains(url, "{pod}") || strings.Contains(url, "{uid}") {
		return ""
	}
	what := "every pod of the Job and every retry"
	if strings.Contains(url, "{index}") {
		what = "every retry of an index"
	}
	return fmt.Sprintf("%q has no {pod} or {uid}, so %s (and a re-run of the Job) stages out to the same prefix: kdefer refuses to overwrite an earlier attempt's outputs and the later attempt's run fails; add {pod} (e.g. .../{job}/{index}/{pod}/), or set stageOut.overwrite: true in the DeferPolicy to replace them on purpose", url, what)
}
