package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// decode decodes a Job, CronJob, Pod, DeferPolicy, ClusterDeferPolicy or
// Namespace document strictly, as the
// apiserver does with kubectl's default --validate=strict: an unknown
// field (a typo, or a field of a newer API) or a duplicate one is a problem
// naming its line, or with --validate=warn a warning. Other kinds are not
// decoded: render passes them through as written.
func (d *document) decode(mode string) {
	var target any
	switch {
	case d.isJob():
		d.jobObj = &batchv1.Job{}
		target = d.jobObj
	case d.isCronJob():
		d.cronObj = &batchv1.CronJob{}
		target = d.cronObj
	case d.isPod():
		d.podObj = &corev1.Pod{}
		target = d.podObj
	case d.isPolicy():
		d.policy = &v1.DeferPolicy{}
		target = d.policy
	case d.isClusterPolicy():
		d.cluster = &v1.ClusterDeferPolicy{}
		target = d.cluster
	case d.isNamespace():
		d.nsObj = &corev1.Namespace{}
		target = d.nsObj
	default:
		return
	}
	// Duplicate keys are gone once the YAML is JSON: find them in the YAML.
	if _, err := yaml.YAMLToJSONStrict(d.raw); err != nil {
		d.strict(mode, d.fileLines(err.Error()))
	}
	strictErrs, err := sigsjson.UnmarshalStrict(d.json, target, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	if err != nil {
		d.jobObj, d.cronObj, d.podObj, d.policy, d.cluster, d.nsObj = nil, nil, nil, nil, nil, nil
		d.problems = append(d.problems, d.decodeError(err))
		return
	}
	for _, e := range strictErrs {
		msg := e.Error()
		var fp interface{ FieldPath() string }
		if errors.As(e, &fp) {
			if ln := d.lines.line(fp.FieldPath()); ln > 0 {
				msg = fmt.Sprintf("line %d: %s", ln, msg)
			}
		}
		d.strict(mode, msg+"; fix: correct or remove it (--validate=warn accepts fields of a newer API version)")
	}
}

func (d *document) strict(mode, msg string) {
	switch mode {
	case validateStrict:
		d.problems = append(d.problems, msg)
	case validateWarn:
		d.warnings = append(d.warnings, msg)
	}
}

// decodeError names the field (and its line) of a value that does not
// decode, where the decoder says which.
func (d *document) decodeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		msg := fmt.Sprintf("%s: cannot be a JSON %s (want %s)", te.Field, te.Value, te.Type)
		if ln := d.lines.line(te.Field); ln > 0 {
			msg = fmt.Sprintf("line %d: %s", ln, msg)
		}
		return msg
	}
	return "cannot decode: " + strings.TrimPrefix(err.Error(), "json: ")
}

var yamlLine = regexp.MustCompile(`line (\d+):`)

// fileLines turns the document-relative "line N:" of a YAML error into
// lines of the file.
func (d *document) fileLines(msg string) string {
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.ReplaceAll(msg, "yaml: unmarshal errors:\n  ", "")
	return yamlLine.ReplaceAllStringFunc(msg, func(m string) string {
		n, _ := strconv.Atoi(yamlLine.FindStringSubmatch(m)[1])
		return fmt.Sprintf("line %d:", n+d.lines.first-1)
	})
}

// lineIndex finds the line of a field of one document in its file.
type lineIndex struct {
	root   *yaml3.Node // the document's top node; nil if it does not parse
	first  int         // the line of the file the document starts on
	prefix string      // the path of this object in the document (List items)
}

func newLineIndex(raw []byte, first int) lineIndex {
	var n yaml3.Node
	if err := yaml3.Unmarshal(raw, &n); err != nil || len(n.Content) == 0 {
		return lineIndex{first: first}
	}
	return lineIndex{root: n.Content[0], first: first}
}

func (l lineIndex) under(path string) lineIndex {
	l.prefix = joinPath(l.prefix, path)
	return l
}

func joinPath(a, b string) string {
	if a == "" || strings.HasPrefix(b, "[") {
		return a + b
	}
	return a + "." + b
}

// line returns the line of the field at path (as sigs.k8s.io/json writes
// it: spec.template.spec.containers[0].name), or of the deepest part of it
// that exists, or 0.
func (l lineIndex) line(path string) int {
	if l.root == nil {
		return 0
	}
	n, at := l.root, l.root.Line
	rest := joinPath(l.prefix, path)
	for rest != "" {
		switch rest[0] {
		case '.':
			rest = rest[1:]
		case '[':
			j := strings.IndexByte(rest, ']')
			i, err := strconv.Atoi(rest[1:max(j, 1)])
			if j < 0 || err != nil || n.Kind != yaml3.SequenceNode || i >= len(n.Content) {
				return l.first + at - 1
			}
			n, at, rest = n.Content[i], n.Content[i].Line, rest[j+1:]
		default:
			if n.Kind != yaml3.MappingNode {
				return l.first + at - 1
			}
			// The longest key that starts the rest: keys may hold dots.
			best := -1
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if strings.HasPrefix(rest, k) && (len(rest) == len(k) || rest[len(k)] == '.' || rest[len(k)] == '[') &&
					(best < 0 || len(k) > len(n.Content[best].Value)) {
					best = i
				}
			}
			if best < 0 {
				return l.first + at - 1
			}
			at = n.Content[best].Line
			rest = rest[len(n.Content[best].Value):]
			n = n.Content[best+1]
		}
	}
	return l.first + at - 1
}
