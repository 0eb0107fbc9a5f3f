package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/resource"
	"sigs.k8s.io/yaml"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/resolve"
)

// inputFlags are the input flags of render and lint, kubectl's: -f FILE|DIR|-
// (repeatable), -R, --validate.
type inputFlags struct {
	resource.FilenameOptions
	validate string
}

func (f *inputFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringSliceVarP(&f.Filenames, "filename", "f", nil, "file or directory with Jobs (and the DeferPolicies they name, and their namespace's default); - for stdin; repeatable")
	cmd.Flags().BoolVarP(&f.Recursive, "recursive", "R", false, "process the directories named by -f recursively")
	cmd.Flags().StringVar(&f.validate, "validate", validateStrict, `unknown and duplicate fields of Jobs, CronJobs, Pods and DeferPolicies: "strict" errors, "warn" warnings, "ignore"`)
}

const (
	validateStrict = "strict"
	validateWarn   = "warn"
	validateIgnore = "ignore"
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
	// lines finds a field's line in the file (decode.go).
	lines lineIndex
	// problems and warnings found while decoding (decode.go).
	problems, warnings []string
	// The decoded object of a Job, CronJob, Pod or DeferPolicy document
	// (nil when it could not be decoded: problems say why).
	jobObj  *batchv1.Job
	cronObj *batchv1.CronJob
	podObj  *corev1.Pod
	policy  *v1.DeferPolicy
	cluster *v1.ClusterDeferPolicy
	nsObj   *corev1.Namespace
}

func (d *document) isJob() bool     { return d.kind == "Job" && d.apiVer == "batch/v1" }
func (d *document) isCronJob() bool { return d.kind == "CronJob" && d.apiVer == "batch/v1" }

// isPod: a pod no Job made (a CI runner's build pod), which kdefer's pod
// webhook renders as it is created.
func (d *document) isPod() bool { return d.kind == "Pod" && d.apiVer == "v1" }
func (d *document) isPolicy() bool {
	return d.kind == "DeferPolicy" && d.apiVer == v1.GroupVersion.String()
}
func (d *document) isClusterPolicy() bool {
	return d.kind == "ClusterDeferPolicy" && d.apiVer == v1.GroupVersion.String()
}

// isNamespace: its labels say which ClusterDeferPolicies select it.
func (d *document) isNamespace() bool { return d.kind == "Namespace" && d.apiVer == "v1" }

func (d *document) String() string {
	n := d.name
	if d.ns != "" {
		n = d.ns + "/" + d.name
	}
	return fmt.Sprintf("%s: %s %s", d.source, d.kind, n)
}

// readInput reads the documents of render's and lint's -f files and decodes
// their Jobs, CronJobs and DeferPolicies. A file that cannot be read is a
// usage error (exit 2); a document that cannot be decoded carries its
// problems, so that every one is reported, not the first.
func readInput(f *inputFlags, stdin io.Reader) ([]*document, policies, error) {
	switch f.validate {
	case validateStrict, validateWarn, validateIgnore:
	default:
		return nil, policies{}, &exitError{code: 2, msg: fmt.Sprintf("--validate=%q: want strict, warn or ignore", f.validate)}
	}
	docs, err := readDocuments(&f.FilenameOptions, stdin)
	if err != nil {
		return nil, policies{}, &exitError{code: 2, msg: err.Error()}
	}
	ps := policies{namespaces: map[string]map[string]string{}}
	for _, d := range docs {
		d.decode(f.validate)
		switch {
		case d.policy != nil:
			ps.list = append(ps.list, d.policy)
		case d.cluster != nil:
			ps.cluster = append(ps.cluster, *d.cluster)
		case d.nsObj != nil:
			ps.namespaces[d.nsObj.Name] = d.nsObj.Labels
		}
	}
	return docs, ps, nil
}

// readDocuments reads every document of every file ("-" is stdin; a
// directory holds the .json, .yaml and .yml files in it, and with -R in its
// subdirectories, as kubectl reads them), expanding v1 Lists.
func readDocuments(o *resource.FilenameOptions, stdin io.Reader) ([]*document, error) {
	if len(o.Filenames) == 0 {
		return nil, errors.New("no input: pass -f FILE, -f DIR (-R for subdirectories) or -f - for stdin")
	}
	var docs []*document
	for _, f := range o.Filenames {
		if f == "-" {
			b, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("reading stdin: %w", err)
			}
			ds, err := splitDocuments("<stdin>", b)
			if err != nil {
				return nil, err
			}
			docs = append(docs, ds...)
			continue
		}
		// cli-runtime's own expansion, so -f DIR and -R mean what they
		// mean to kubectl apply.
		visitors, err := resource.ExpandPathsToFileVisitors(nil, f, o.Recursive, resource.FileExtensions, nil)
		if err != nil {
			return nil, err
		}
		if len(visitors) == 0 {
			return nil, fmt.Errorf("%s: no .json, .yaml or .yml files", f)
		}
		for _, v := range visitors {
			path := v.(*resource.FileVisitor).Path
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			ds, err := splitDocuments(path, b)
			if err != nil {
				return nil, err
			}
			docs = append(docs, ds...)
		}
	}
	return docs, nil
}

// splitDocuments splits one file into its documents, each knowing the line
// it starts on.
func splitDocuments(name string, content []byte) ([]*document, error) {
	var docs []*document
	yr := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(content)))
	pos := 0
	for i := 1; ; i++ {
		raw, err := yr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		// The reader returns each document's lines as written: find them
		// in the file for the line numbers of messages.
		first := 1
		if at := bytes.Index(content[pos:], raw); at >= 0 {
			first += bytes.Count(content[:pos+at], []byte("\n"))
			pos += at + len(raw)
		}
		if len(bytes.TrimSpace(stripComments(raw))) == 0 {
			continue
		}
		ds, err := parseDocument(fmt.Sprintf("%s#%d", name, i), raw, newLineIndex(raw, first))
		if err != nil {
			return nil, err
		}
		docs = append(docs, ds...)
	}
	return docs, nil
}

// parseDocument reads a document's head (kind, name); a List becomes its
// items.
func parseDocument(source string, raw []byte, lines lineIndex) ([]*document, error) {
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
			ds, err := parseDocument(fmt.Sprintf("%s.items[%d]", source, i), it, lines.under(fmt.Sprintf("items[%d]", i)))
			if err != nil {
				return nil, err
			}
			out = append(out, ds...)
		}
		return out, nil
	}
	return []*document{{source: source, raw: raw, json: js, kind: head.Kind, apiVer: head.APIVersion,
		name: head.Metadata.Name, ns: head.Metadata.Namespace, lines: lines}}, nil
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
// jobTemplate stands for (named and namespaced as the CronJob); nil when the
// document could not be decoded.
func (d *document) job() *batchv1.Job {
	if d.cronObj != nil {
		return render.CronJobJob(d.cronObj)
	}
	return d.jobObj
}

// policies are the input's DeferPolicies, ClusterDeferPolicies and
// namespaces' labels: the resolve.Source render and lint decide with.
type policies struct {
	list    []*v1.DeferPolicy
	cluster []v1.ClusterDeferPolicy
	// namespaces are the labels of the input's Namespaces, by name.
	namespaces map[string]map[string]string
}

// lookup finds the policy a Job names; a policy or Job without a namespace
// matches any namespace.
func (ps policies) lookup(name, ns string) *v1.DeferPolicy {
	for _, p := range ps.list {
		if p.Name == name && (p.Namespace == "" || ns == "" || p.Namespace == ns) {
			return p
		}
	}
	return nil
}

// wantsKdefer reports whether a Job opts in: the label, or any kdefer.io
// configuration annotation.
func wantsKdefer(j *batchv1.Job) bool {
	return optsIn(j.Labels, j.Annotations, j.Spec.Template.Annotations)
}

// optsIn reports whether an object with these labels and annotations opts
// in: the label, or any kdefer.io configuration annotation.
func optsIn(labels map[string]string, annotations ...map[string]string) bool {
	if labels[v1.LabelEnabled] == "true" {
		return true
	}
	for _, k := range v1.ConfigAnnotations {
		for _, a := range annotations {
			if _, ok := a[k]; ok {
				return true
			}
		}
	}
	return false
}

// forJob decides for a Job as the webhooks do: the Job as admission
// arms it (resolve.MarkJob: kdefer's label when a ClusterDeferPolicy of
// the input selects it, the template's kdefer.io/cluster-policy), whether
// it is armed, and the spec of the policy that applies (nil for none). An
// error says what the webhook would refuse, or that the input lacks the
// named policy.
func (ps policies) forJob(j *batchv1.Job) (*batchv1.Job, bool, *v1.DeferPolicySpec, error) {
	if !wantsKdefer(j) && len(ps.cluster) == 0 {
		return j, false, nil, nil
	}
	s := resolve.JobSubject(j)
	applied, err := ps.resolve(s)
	if err != nil {
		return j, true, nil, err
	}
	marked, armed := resolve.MarkJob(j, applied)
	return marked, armed || wantsKdefer(j), applied.Spec(), nil
}

// arms reports whether the webhooks arm j (or refuse it).
func (ps policies) arms(j *batchv1.Job) bool {
	_, armed, _, _ := ps.forJob(j)
	return armed
}

// spec returns the spec of the policy that applies, as the webhooks
// decide it (resolve.Policy), to a pod no Job made: nil if none does, or
// an error if the input lacks the named one or a locked policy forbids it.
func (ps policies) spec(pod *corev1.Pod) (*v1.DeferPolicySpec, error) {
	applied, err := ps.resolve(resolve.PodSubject(pod))
	if err != nil {
		return nil, err
	}
	return applied.Spec(), nil
}

// resolve is resolve.Policy on the input, a missing named policy told as
// such.
func (ps policies) resolve(s resolve.Subject) (resolve.Applied, error) {
	applied, err := resolve.Policy(context.Background(), ps, s)
	if apierrors.IsNotFound(err) {
		return applied, &v1.AnnotationError{Key: v1.AnnotationPolicy, Value: s.Named,
			Problem: fmt.Sprintf("names DeferPolicy %q, which is not in the input", s.Named),
			Fix:     "pass the policy too (kdefer render -f policy.yaml -f job.yaml), or get it with kubectl get deferpolicy " + s.Named + " -o yaml"}
	}
	return applied, err
}

// unknownNamespace warns that the input's ClusterDeferPolicies were
// matched against no labels for a Job of a namespace the input lacks.
func (ps policies) unknownNamespace(ns string) string {
	if len(ps.cluster) == 0 {
		return ""
	}
	if _, ok := ps.namespaces[ns]; ok {
		return ""
	}
	name := ns
	if name == "" {
		name = "(none given)"
	}
	return fmt.Sprintf("the Job's namespace %s is not in the input, so the ClusterDeferPolicies' namespaceSelectors were matched against no labels; fix: pass its Namespace too (kubectl get namespace NAME -o yaml)", name)
}

// Get implements resolve.Source on the input.
func (ps policies) Get(_ context.Context, ns, name string) (*v1.DeferPolicy, error) {
	if p := ps.lookup(name, ns); p != nil {
		return p, nil
	}
	return nil, apierrors.NewNotFound(v1.GroupVersion.WithResource("deferpolicies").GroupResource(), name)
}

// Defaults implements resolve.Source on the input: its namespace defaults
// of namespace ns; as for lookup, a policy or object without a namespace
// matches any namespace.
func (ps policies) Defaults(_ context.Context, ns string) ([]v1.DeferPolicy, error) {
	var out []v1.DeferPolicy
	for _, p := range ps.list {
		if p.Spec.NamespaceDefault && (p.Namespace == "" || ns == "" || p.Namespace == ns) {
			out = append(out, *p)
		}
	}
	return out, nil
}

// ClusterPolicies implements resolve.Source on the input.
func (ps policies) ClusterPolicies(context.Context) ([]v1.ClusterDeferPolicy, error) {
	return ps.cluster, nil
}

// NamespaceLabels implements resolve.Source on the input: the labels of
// its Namespace of that name (none if it has none).
func (ps policies) NamespaceLabels(_ context.Context, ns string) (map[string]string, error) {
	return ps.namespaces[ns], nil
}
