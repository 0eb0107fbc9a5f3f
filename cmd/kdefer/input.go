package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// document is one object of the input.
type document struct {
	source string // file name and document number, for messages
	raw    []byte // the document as written (YAML or JSON)
	json   []byte
	kind   string
	apiVer string
	name   string
	ns     string
}

func (d *document) isJob() bool { return d.kind == "Job" && d.apiVer == "batch/v1" }

func (d *document) isCronJob() bool { return d.kind == "CronJob" && d.apiVer == "batch/v1" }
func (d *document) isPolicy() bool {
	return d.kind == "DeferPolicy" && d.apiVer == v1.GroupVersion.String()
}

func (d *document) String() string {
	n := d.name
	if d.ns != "" {
		n = d.ns + "/" + d.name
	}
	return fmt.Sprintf("%s: %s %s", d.source, d.kind, n)
}

// readInput reads the documents of render's and lint's -f files and the
// DeferPolicies among them; a bad input is a usage error (exit 2).
func readInput(files []string, stdin io.Reader) ([]*document, policies, error) {
	docs, err := readDocuments(files, stdin)
	if err != nil {
		return nil, nil, &exitError{code: 2, msg: err.Error()}
	}
	ps, err := collectPolicies(docs)
	if err != nil {
		return nil, nil, &exitError{code: 2, msg: err.Error()}
	}
	return docs, ps, nil
}

// readDocuments reads every document of every file ("-" is stdin),
// expanding v1 Lists.
func readDocuments(files []string, stdin io.Reader) ([]*document, error) {
	if len(files) == 0 {
		return nil, errors.New("no input: pass -f FILE (or -f - for stdin)")
	}
	var docs []*document
	for _, f := range files {
		var r io.Reader
		name := f
		if f == "-" {
			r, name = stdin, "<stdin>"
		} else {
			fh, err := os.Open(f)
			if err != nil {
				return nil, err
			}
			defer fh.Close()
			r = fh
		}
		yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
		for i := 1; ; i++ {
			raw, err := yr.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
			}
			if len(bytes.TrimSpace(stripComments(raw))) == 0 {
				continue
			}
			ds, err := parseDocument(fmt.Sprintf("%s#%d", name, i), raw)
			if err != nil {
				return nil, err
			}
			docs = append(docs, ds...)
		}
	}
	return docs, nil
}

func parseDocument(source string, raw []byte) ([]*document, error) {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var head struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Items      []json.RawMessage `json:"items"`
		Metadata   struct {
			Name, Namespace string
		} `json:"metadata"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		return nil, fmt.Errorf("%s: not an object: %w", source, err)
	}
	if head.Kind == "List" || strings.HasSuffix(head.Kind, "List") && head.Items != nil {
		var out []*document
		for i, it := range head.Items {
			ds, err := parseDocument(fmt.Sprintf("%s.items[%d]", source, i), it)
			if err != nil {
				return nil, err
			}
			out = append(out, ds...)
		}
		return out, nil
	}
	return []*document{{source: source, raw: raw, json: js, kind: head.Kind, apiVer: head.APIVersion,
		name: head.Metadata.Name, ns: head.Metadata.Namespace}}, nil
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// job returns the Job of a Job document, or the Job a CronJob document's
// jobTemplate stands for (named and namespaced as the CronJob).
func (d *document) job() (*batchv1.Job, error) {
	if d.isCronJob() {
		cj, err := d.cronJob()
		if err != nil {
			return nil, err
		}
		t := cj.Spec.JobTemplate
		j := &batchv1.Job{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: *t.Spec.DeepCopy()}
		j.Name, j.Namespace = cj.Name, cj.Namespace
		return j, nil
	}
	var j batchv1.Job
	if err := json.Unmarshal(d.json, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", d, err)
	}
	return &j, nil
}

func (d *document) cronJob() (*batchv1.CronJob, error) {
	var cj batchv1.CronJob
	if err := json.Unmarshal(d.json, &cj); err != nil {
		return nil, fmt.Errorf("%s: %w", d, err)
	}
	return &cj, nil
}

// policies indexes the DeferPolicies of the input.
type policies []*v1.DeferPolicy

func collectPolicies(docs []*document) (policies, error) {
	var ps policies
	for _, d := range docs {
		if !d.isPolicy() {
			continue
		}
		var p v1.DeferPolicy
		if err := json.Unmarshal(d.json, &p); err != nil {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		ps = append(ps, &p)
	}
	return ps, nil
}

// lookup finds the policy a Job names; a policy or Job without a namespace
// matches any namespace.
func (ps policies) lookup(name, ns string) *v1.DeferPolicy {
	for _, p := range ps {
		if p.Name == name && (p.Namespace == "" || ns == "" || p.Namespace == ns) {
			return p
		}
	}
	return nil
}

// wantsKdefer reports whether a Job opts in: the label, or any kdefer.io
// configuration annotation.
func wantsKdefer(j *batchv1.Job) bool {
	if j.Labels[v1.LabelEnabled] == "true" {
		return true
	}
	for _, k := range v1.ConfigAnnotations {
		if _, ok := j.Annotations[k]; ok {
			return true
		}
		if _, ok := j.Spec.Template.Annotations[k]; ok {
			return true
		}
	}
	return false
}

// policyFor returns the spec of the DeferPolicy job names, nil if it names
// none, or an error if the input lacks it.
func policyFor(ps policies, j *batchv1.Job) (*v1.DeferPolicySpec, error) {
	name := j.Annotations[v1.AnnotationPolicy]
	if name == "" {
		name = j.Spec.Template.Annotations[v1.AnnotationPolicy]
	}
	if name == "" {
		return nil, nil
	}
	p := ps.lookup(name, j.Namespace)
	if p == nil {
		return nil, &v1.AnnotationError{Key: v1.AnnotationPolicy, Value: name,
			Problem: fmt.Sprintf("names DeferPolicy %q, which is not in the input", name),
			Fix:     "pass the policy too (kdefer render -f policy.yaml -f job.yaml), or get it with kubectl get deferpolicy " + name + " -o yaml"}
	}
	return &p.Spec, nil
}
