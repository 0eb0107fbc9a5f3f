package v1alpha1

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// AnnotationPrefix is the prefix of every kdefer annotation and label.
const AnnotationPrefix = "kdefer.io/"

// ConfigAnnotations are the annotations that configure kdefer on a Job (or
// its pod template). Render copies them from the Job onto the pod template,
// so a pod alone carries its effective configuration.
var ConfigAnnotations = []string{
	AnnotationPolicy, AnnotationStageOut, AnnotationStageOutPath, AnnotationInclude,
	AnnotationExclude, AnnotationStageIn, AnnotationStageInPath, AnnotationCredentials,
	AnnotationWorkVolume, AnnotationWorkMountPath, AnnotationWorkSize, AnnotationStorageClass,
	AnnotationTriggers, AnnotationDeadline, AnnotationSkip,
}

// StatusAnnotations are written by kdefer itself; they are not configuration.
var StatusAnnotations = []string{AnnotationRendered, AnnotationSummary, AnnotationClusterPolicy}

// TriggersAll selects every trigger in AnnotationTriggers.
const TriggersAll = "all"

// Annotations is the parsed form of kdefer's configuration annotations. A nil
// pointer or a nil slice means the annotation is absent, so the DeferPolicy's
// field (or the default) applies.
// +kubebuilder:object:generate=false
type Annotations struct {
	Policy        string
	StageOut      *string
	StageOutPath  *string
	Include       []string
	Exclude       []string
	StageIn       []string
	StageInPath   *string
	Credentials   *string
	WorkVolume    *string
	WorkMountPath *string
	WorkSize      *resource.Quantity
	StorageClass  *string
	// Triggers that run the defer steps; nil when absent or "all".
	Triggers []Trigger
	Deadline *metav1.Duration
	Skip     bool
	// Rendered is the kdefer version that rendered the template, if any.
	Rendered string
}

// AnnotationError is one problem with one annotation: what is wrong and how
// to fix it.
// +kubebuilder:object:generate=false
type AnnotationError struct {
	Key, Value, Problem, Fix string
}

func (e *AnnotationError) Error() string {
	s := fmt.Sprintf("annotation %s: %s", e.Key, e.Problem)
	if e.Fix != "" {
		s += "; fix: " + e.Fix
	}
	return s
}

// AnnotationErrors are every problem ParseAnnotations found, sorted by key.
// +kubebuilder:object:generate=false
type AnnotationErrors []*AnnotationError

func (es AnnotationErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap lets errors.As find each AnnotationError.
func (es AnnotationErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// ParseAnnotations parses kdefer's configuration annotations. It is the only
// parser of them. It reports every problem at once (as AnnotationErrors),
// each naming the annotation and the fix. Keys it does not know are ignored
// here; UnknownAnnotations reports them.
func ParseAnnotations(annotations map[string]string) (*Annotations, error) {
	p := &parser{a: &Annotations{}}
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		if strings.HasPrefix(k, AnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		p.parse(k, annotations[k])
	}
	if len(p.errs) > 0 {
		return p.a, p.errs
	}
	return p.a, nil
}

// UnknownAnnotations returns a message for every kdefer.io/ annotation that
// is neither configuration nor status, with a suggestion where one is close:
// a typo would otherwise be silently ignored.
func UnknownAnnotations(annotations map[string]string) []string {
	known := map[string]bool{}
	for _, k := range append(append([]string{}, ConfigAnnotations...), StatusAnnotations...) {
		known[k] = true
	}
	var out []string
	for k := range annotations {
		if !strings.HasPrefix(k, AnnotationPrefix) || known[k] {
			continue
		}
		msg := fmt.Sprintf("annotation %s is not a kdefer annotation and is ignored", k)
		if s := closest(k, ConfigAnnotations); s != "" {
			msg += fmt.Sprintf("; did you mean %s?", s)
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

type parser struct {
	a    *Annotations
	errs AnnotationErrors
}

func (p *parser) fail(key, value, problem, fix string) {
	p.errs = append(p.errs, &AnnotationError{Key: key, Value: value, Problem: problem, Fix: fix})
}

// name reports whether v is a valid name under rule (one of the
// Kubernetes name validations), and records the failure, naming the kind
// of object v should name, when it is not: the name-valued annotations
// share one wording.
func (p *parser) name(key, v string, rule func(string) []string, kind, fix string) bool {
	if errs := rule(v); len(errs) > 0 {
		p.fail(key, v, fmt.Sprintf("%q is not a %s name (%s)", v, kind, errs[0]), fix)
		return false
	}
	return true
}

func (p *parser) parse(key, v string) {
	if key == AnnotationSummary {
		return
	}
	if key == AnnotationRendered {
		p.a.Rendered = v
		return
	}
	known := false
	for _, k := range ConfigAnnotations {
		known = known || k == key
	}
	if !known {
		return
	}
	if strings.TrimSpace(v) == "" {
		p.fail(key, v, "is empty", "set a value or remove the annotation")
		return
	}
	switch key {
	case AnnotationPolicy:
		if p.name(key, v, validation.IsDNS1123Subdomain, "DeferPolicy", "name a DeferPolicy in the Job's namespace, e.g. kdefer.io/policy: default") {
			p.a.Policy = v
		}
	case AnnotationStageOut:
		if msg := CheckStageURL(v, false); msg != "" {
			p.fail(key, v, msg, "use e.g. s3://bucket/runs/{namespace}/{job}/{pod}/")
			return
		}
		p.a.StageOut = &v
	case AnnotationStageIn:
		var urls []string
		for _, u := range splitList(v) {
			if msg := CheckStageURL(u, true); msg != "" {
				p.fail(key, v, msg, "use a comma-separated list of URLs, e.g. s3://bucket/inputs/,s3://bucket/runs/x/_kdefer/manifest.json")
				return
			}
			urls = append(urls, u)
		}
		if len(urls) == 0 {
			p.fail(key, v, "holds no URL", "use a comma-separated list of URLs")
			return
		}
		if len(urls) > 16 {
			p.fail(key, v, fmt.Sprintf("lists %d URLs, at most 16 are allowed", len(urls)), "stage in a common prefix instead")
			return
		}
		p.a.StageIn = urls
	case AnnotationStageOutPath, AnnotationStageInPath:
		if msg := CheckRelativePath(v); msg != "" {
			p.fail(key, v, msg, "use a directory relative to the work volume, e.g. outputs")
			return
		}
		vv := v
		if key == AnnotationStageOutPath {
			p.a.StageOutPath = &vv
		} else {
			p.a.StageInPath = &vv
		}
	case AnnotationInclude, AnnotationExclude:
		globs := splitGlobs(v)
		for _, g := range globs {
			if msg := CheckGlob(g); msg != "" {
				p.fail(key, v, msg, "use comma-separated globs relative to the stage-out path, e.g. *.root,logs/**")
				return
			}
		}
		if key == AnnotationInclude {
			p.a.Include = globs
		} else {
			p.a.Exclude = globs
		}
	case AnnotationCredentials:
		if p.name(key, v, validation.IsDNS1123Subdomain, "Secret", "name a Secret in the Job's namespace") {
			p.a.Credentials = &v
		}
	case AnnotationWorkVolume:
		if p.name(key, v, validation.IsDNS1123Label, "volume", "name a pod volume (a DNS label, e.g. work)") {
			p.a.WorkVolume = &v
		}
	case AnnotationWorkMountPath:
		if !IsMountPath(v) {
			p.fail(key, v, fmt.Sprintf("%q is not an absolute path", v), "use an absolute path without '..' or ':', e.g. /kdefer")
			return
		}
		p.a.WorkMountPath = &v
	case AnnotationWorkSize:
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			p.fail(key, v, fmt.Sprintf("%q is not a positive quantity", v), "use a size such as 10Gi")
			return
		}
		p.a.WorkSize = &q
	case AnnotationStorageClass:
		if p.name(key, v, validation.IsDNS1123Subdomain, "StorageClass", "name a StorageClass, or remove the annotation for the cluster default") {
			p.a.StorageClass = &v
		}
	case AnnotationTriggers:
		ts, msg := ParseTriggers(v)
		if msg != "" {
			p.fail(key, v, msg, fmt.Sprintf("use %q or a comma-separated list of %s", TriggersAll, triggerNames()))
			return
		}
		p.a.Triggers = ts
	case AnnotationDeadline:
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			p.fail(key, v, fmt.Sprintf("%q is not a positive duration", v), "use a Go duration such as 30m or 2h")
			return
		}
		p.a.Deadline = &metav1.Duration{Duration: d}
	case AnnotationSkip:
		b, err := strconv.ParseBool(v)
		if err != nil {
			p.fail(key, v, fmt.Sprintf("%q is not a boolean", v), `use "true" or "false"`)
			return
		}
		p.a.Skip = b
	}
}

// ParseTriggers parses "all" (nil) or a comma-separated list of trigger
// names, matched without regard to case. It returns a problem description,
// or "".
func ParseTriggers(v string) ([]Trigger, string) {
	items := splitList(v)
	if len(items) == 1 && strings.EqualFold(items[0], TriggersAll) {
		return nil, ""
	}
	if len(items) == 0 {
		return nil, "lists no trigger"
	}
	var out []Trigger
	seen := map[Trigger]bool{}
	for _, it := range items {
		var t Trigger
		for _, k := range AllTriggers {
			if strings.EqualFold(string(k), it) {
				t = k
			}
		}
		if t == "" {
			if strings.EqualFold(it, TriggersAll) {
				return nil, `"all" cannot be combined with trigger names`
			}
			return nil, fmt.Sprintf("%q is not a trigger", it)
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, ""
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// splitGlobs splits a comma-separated glob list at the commas outside
// braces, so "*.{root,log},logs/**" is two globs.
func splitGlobs(v string) []string {
	var out []string
	depth, start := 0, 0
	add := func(s string) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '\\':
			i++ // an escaped character is never a separator
		case '{':
			depth++
		case '}':
			depth = max(depth-1, 0)
		case ',':
			if depth == 0 {
				add(v[start:i])
				start = i + 1
			}
		}
	}
	add(v[start:])
	return out
}

func triggerNames() string {
	names := make([]string, len(AllTriggers))
	for i, t := range AllTriggers {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// closest returns the candidate within edit distance 3 of s, or "".
func closest(s string, candidates []string) string {
	best, bestD := "", 4
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
