package doccheck

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/kdefer/kdefer/test/repo"
)

// userDocs are what a user reads: no issue numbers, no links out of the
// repository but to upstream Kubernetes docs. docs/development.md and
// test/bench/*.md, for those who change kdefer, may cite upstream bugs.
var userDocs = []string{
	"README.md",
	"docs/api.md",
	"docs/design.md",
	"docs/security.md",
	"docs/stage.md",
	"docs/usage.md",
}

// upstreamDocs are the places outside the repository a user doc may link to.
var upstreamDocs = []string{
	"kubernetes.io/",
	"github.com/kubernetes/",
	"github.com/kubernetes-sigs/",
	"git.k8s.io/",
}

// markdownFiles are the Markdown files whose links must resolve.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "test/bench/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	for _, f := range userDocs {
		if !slices.Contains(files, f) {
			t.Errorf("%s: a user doc that is missing", f)
		}
	}
	return files
}

// doc is one Markdown file as the checks see it.
type doc struct {
	anchors  map[string]bool // GitHub's heading anchors and HTML ids
	headings []string        // each heading's text as rendered
	links    []pos           // each link's target
	prose    []pos           // each line outside code blocks, code spans blanked
}

type pos struct {
	line int
	text string
}

var (
	fenceRE   = regexp.MustCompile("^\\s*(```|~~~)")
	headingRE = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	// [text](target "title"), text with one level of nested brackets.
	linkRE    = regexp.MustCompile(`\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]*(?:\([^()\s]*\)[^()\s<>]*)*)>?(?:\s+"[^"]*")?\s*\)`)
	refDefRE  = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	autoRE    = regexp.MustCompile(`<(https?://[^>\s]+)>`)
	htmlIDRE  = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	htmlTagRE = regexp.MustCompile(`<[^>]+>`)
	bareURLRE = regexp.MustCompile(`https?://[^\s)>\]"'` + "`" + `]+`)
)

func parseDoc(text string) *doc {
	d := &doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			switch fence {
			case "":
				fence = m[1]
			case m[1]:
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
		plain := blankCodeSpans(line)
		if m := headingRE.FindStringSubmatch(line); m != nil {
			h := renderInline(m[1])
			d.headings = append(d.headings, h)
			s := slug(h)
			if k := seen[s]; k > 0 {
				d.anchors[fmt.Sprintf("%s-%d", s, k)] = true
			} else {
				d.anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range linkRE.FindAllStringSubmatch(plain, -1) {
			d.links = append(d.links, pos{n, m[1]})
		}
		if m := refDefRE.FindStringSubmatch(plain); m != nil {
			d.links = append(d.links, pos{n, m[1]})
		}
		for _, m := range autoRE.FindAllStringSubmatch(plain, -1) {
			d.links = append(d.links, pos{n, m[1]})
		}
		d.prose = append(d.prose, pos{n, plain})
	}
	return d
}

// blankCodeSpans replaces each `code span` by x: links and URLs in code are
// not links, and the brackets around a span stay balanced.
func blankCodeSpans(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		ticks := s[i:j]
		k := strings.Index(s[j:], ticks)
		if k < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString("x")
		s = s[j+k+len(ticks):]
	}
}

var inlineLinkRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// renderInline is a heading's text as GitHub renders it: code spans keep
// their content, links their text, HTML tags go.
func renderInline(s string) string {
	s = inlineLinkRE.ReplaceAllString(s, "$1")
	s = htmlTagRE.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, "`", "")
}

// slug is GitHub's anchor for a heading (github-slugger): lower case, every
// character but letters, digits, marks, '_', '-' and ' ' dropped, each space
// a '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// docs reads and parses Markdown files by repository path, once each.
type docs struct {
	root  string
	cache map[string]*doc
}

func (c *docs) get(rel string) (*doc, error) {
	if d, ok := c.cache[rel]; ok {
		return d, nil
	}
	b, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	d := parseDoc(string(b))
	c.cache[rel] = d
	return d, nil
}

// hasSection says whether a section named in prose ("docs/usage.md,
// "Owners beyond Job"") is a heading of d: the whole heading, or the part
// before its colon.
func (d *doc) hasSection(name string) bool {
	want := slug(name)
	for _, h := range d.headings {
		short, _, _ := strings.Cut(h, ":")
		if slug(h) == want || slug(short) == want {
			return true
		}
	}
	return false
}

func isUpstream(u string) bool {
	rest := strings.TrimPrefix(strings.TrimPrefix(u, "https://"), "http://")
	rest = strings.TrimPrefix(rest, "www.")
	for _, p := range upstreamDocs {
		if strings.HasPrefix(rest, p) {
			return true
		}
	}
	return false
}

// Every link in README.md, docs/ and test/bench/ reaches a file of the
// repository, and a heading of it where it names one; the user docs link
// out of the repository only to upstream Kubernetes docs.
func TestMarkdownLinks(t *testing.T) {
	root := repo.MustRoot()
	c := &docs{root: root, cache: map[string]*doc{}}
	for _, file := range markdownFiles(t, root) {
		d, err := c.get(file)
		if err != nil {
			t.Fatal(err)
		}
		user := slices.Contains(userDocs, file)
		for _, l := range d.links {
			if err := checkLink(c, file, l.text, user); err != nil {
				t.Errorf("%s:%d: link %s: %v", file, l.line, l.text, err)
			}
		}
		if !user {
			continue
		}
		for _, p := range d.prose {
			for _, u := range bareURLRE.FindAllString(p.text, -1) {
				u = strings.TrimRight(u, ".,;:")
				if !isUpstream(u) && !slices.ContainsFunc(d.links, func(l pos) bool { return l.text == u }) {
					t.Errorf("%s:%d: %s: a user doc links only to the repository and upstream Kubernetes docs", file, p.line, u)
				}
			}
			for _, m := range githubRefRE.FindAllString(p.text, -1) {
				t.Errorf("%s:%d: %s: a reference to another repository's issue; a user doc says what is so, not where it was found (docs/development.md may cite it)", file, p.line, strings.TrimSpace(m))
			}
		}
	}
}

// owner/repo#123, which GitHub links to that repository's issue.
var githubRefRE = regexp.MustCompile(`\b[\w.-]+/[\w.-]+#\d+\b`)

func checkLink(c *docs, file, target string, user bool) error {
	if strings.HasPrefix(target, "mailto:") {
		return nil
	}
	if strings.Contains(target, "://") {
		if user && !isUpstream(target) {
			return fmt.Errorf("outside the repository: a user doc links only to the repository and upstream Kubernetes docs (%s)", strings.Join(upstreamDocs, ", "))
		}
		return nil
	}
	rel, frag, _ := strings.Cut(target, "#")
	rel, _, _ = strings.Cut(rel, "?")
	rel, err := url.PathUnescape(rel)
	if err != nil {
		return err
	}
	dest := file
	if rel != "" {
		if strings.HasPrefix(rel, "/") {
			return fmt.Errorf("an absolute path: link relative to %s", file)
		}
		dest = path.Clean(path.Join(path.Dir(file), rel))
		if dest == ".." || strings.HasPrefix(dest, "../") {
			return fmt.Errorf("leaves the repository")
		}
		if _, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(dest))); err != nil {
			return fmt.Errorf("no such file %s", dest)
		}
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return nil
	}
	d, err := c.get(dest)
	if err != nil {
		return err
	}
	if !d.anchors[frag] {
		return fmt.Errorf("%s has no heading with anchor #%s", dest, frag)
	}
	return nil
}

// A user doc says what kdefer does, not how it came to: no issue numbers.
var issueRE = regexp.MustCompile(`(?i)\bissues?\s+#?\d+\b|(?:^|[\s(\[,;])#\d+\b`)

func TestUserDocsCarryNoIssueNumbers(t *testing.T) {
	root := repo.MustRoot()
	for _, file := range userDocs {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parseDoc(string(b)).prose {
			for _, m := range issueRE.FindAllString(p.text, -1) {
				t.Errorf("%s:%d: %q: an issue number in a user doc; say what is so (a note for developers goes in docs/development.md)", file, p.line, strings.TrimSpace(m))
			}
		}
	}
}

// A doc named in prose: docs/FILE.md or README.md, then an anchor, or a
// section in double quotes after a comma or a space (\" inside a Go string).
var (
	docRefRE      = regexp.MustCompile(`(?:^|[^\w./-])((?:\.\./)*(?:README\.md|docs/[\w.-]+\.md|test/bench/[\w.-]+\.md))(?:#([\w-]+)|(?:\s*,\s*|\s+)\\?"([^"\\]{1,120})\\?")?`)
	unquotedSecRE = regexp.MustCompile(`^\s*[,:]\s+[A-Z][A-Za-z]`)
	// What continues a comment on the next line, joined to one line so a
	// reference wrapped in the middle is still seen whole.
	goCommentNL     = regexp.MustCompile(`\n[ \t]*//[ \t]*`)
	hashCommentNL   = regexp.MustCompile(`\n[ \t]*#*[ \t]*`)
	otherNL         = regexp.MustCompile(`\n[ \t]*`)
	checkedSuffixes = []string{".go", ".yaml", ".yml", ".sh", ".md", ".tpl", ".toml", ".txt", "Makefile"}
)

// Every docs/FILE.md#anchor and docs/FILE.md, "Section" named in the
// repository's code, scripts, manifests and docs exists: the CRDs'
// descriptions (kubectl explain) come from api/'s comments, and an error
// message or a comment that sends a reader to a section that was renamed
// sends them nowhere.
func TestDocReferences(t *testing.T) {
	root := repo.MustRoot()
	c := &docs{root: root, cache: map[string]*doc{}}
	checked := 0
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if e.IsDir() {
			switch e.Name() {
			case ".git", "bin", "testdata", "node_modules", "doccheck":
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.ContainsFunc(checkedSuffixes, func(s string) bool { return strings.HasSuffix(rel, s) }) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		nl := hashCommentNL
		switch {
		case strings.HasSuffix(rel, ".go"):
			nl = goCommentNL
		case strings.HasSuffix(rel, ".md"):
			nl = otherNL
		}
		checked += checkDocRefs(t, c, rel, joinLines(string(b), nl), !strings.HasSuffix(rel, ".md"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no reference to a doc found: the pattern is broken")
	}
}

// The CRDs' descriptions, as kubectl explain shows them, name only docs
// and sections that exist.
func TestCRDDescriptionReferences(t *testing.T) {
	root := repo.MustRoot()
	c := &docs{root: root, cache: map[string]*doc{}}
	crds, err := filepath.Glob(filepath.Join(root, "deploy", "crd", "kdefer.io_*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in deploy/crd: %v", err)
	}
	checked := 0
	for _, f := range crds {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd any
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, desc := range descriptions(crd, "") {
			checked += checkDocRefs(t, c, rel+" "+desc[0], joinLines(desc[1], otherNL), true)
		}
	}
	if checked == 0 {
		t.Fatal("the CRDs name no doc: api/v1alpha1's S3 settings name docs/stage.md; the pattern is broken")
	}
}

// descriptions returns each description in a decoded YAML tree, with the
// path to it.
func descriptions(node any, at string) [][2]string {
	var out [][2]string
	switch n := node.(type) {
	case map[string]any:
		for k, v := range n {
			if s, ok := v.(string); ok && k == "description" {
				out = append(out, [2]string{at, s})
				continue
			}
			out = append(out, descriptions(v, at+"."+k)...)
		}
	case []any:
		for i, v := range n {
			out = append(out, descriptions(v, fmt.Sprintf("%s[%d]", at, i))...)
		}
	}
	return out
}

// joined is a text whose continued lines are joined by one space, and
// where its pieces came from in the original.
type joined struct {
	text, orig string
	from       [][2]int // {offset in text, offset in orig} where each piece starts
}

func joinLines(text string, continued *regexp.Regexp) joined {
	j := joined{orig: text, from: [][2]int{{0, 0}}}
	var b strings.Builder
	last := 0
	for _, m := range continued.FindAllStringIndex(text, -1) {
		b.WriteString(text[last:m[0]])
		b.WriteByte(' ')
		last = m[1]
		j.from = append(j.from, [2]int{b.Len(), last})
	}
	b.WriteString(text[last:])
	j.text = b.String()
	return j
}

// line is the original line of an offset in the joined text.
func (j joined) line(off int) int {
	i, _ := slices.BinarySearchFunc(j.from, off, func(f [2]int, off int) int { return f[0] - off })
	if i == len(j.from) || j.from[i][0] > off {
		i--
	}
	o := j.from[i][1] + off - j.from[i][0]
	return 1 + strings.Count(j.orig[:o], "\n")
}

// checkDocRefs checks each doc named in text and returns how many it found.
// strict also refuses a section named without quotes, which no check can
// delimit.
func checkDocRefs(t *testing.T, c *docs, where string, j joined, strict bool) int {
	t.Helper()
	n := 0
	text := j.text
	for _, m := range docRefRE.FindAllStringSubmatchIndex(text, -1) {
		n++
		where := fmt.Sprintf("%s:%d", where, j.line(m[2]))
		// Named from the repository's root; a Markdown link's ../ are
		// relative to its file, and lead to the root here.
		file := strings.TrimLeft(text[m[2]:m[3]], "./")
		ref := strings.TrimSpace(text[m[2]:m[1]])
		d, err := c.get(file)
		if err != nil {
			t.Errorf("%s: %s: no such file", where, ref)
			continue
		}
		switch {
		case m[4] >= 0:
			if anchor := text[m[4]:m[5]]; !d.anchors[anchor] {
				t.Errorf("%s: %s: %s has no heading with anchor #%s", where, ref, file, anchor)
			}
		case m[6] >= 0:
			if sec := text[m[6]:m[7]]; !d.hasSection(sec) {
				t.Errorf("%s: %s: %s has no heading %q", where, ref, file, sec)
			}
		case strict && unquotedSecRE.MatchString(text[m[3]:]):
			end := min(len(text), m[3]+40)
			t.Errorf("%s: %s: name the section in double quotes (docs/FILE.md, \"Heading\") or by its anchor, so it can be checked", where, text[m[2]:end])
		}
	}
	return n
}

// TestE2EScenarioCount: docs/development.md states how many e2e scenarios
// there are, once, as "N scenarios (the `Test*` functions of `test/e2e`";
// the figure must be the count of those functions, so it cannot drift as
// scenarios are added.
func TestE2EScenarioCount(t *testing.T) {
	root := repo.MustRoot()
	files, err := filepath.Glob(filepath.Join(root, "test/e2e/*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += len(fn.FindAll(b, -1))
	}
	dev, err := os.ReadFile(filepath.Join(root, "docs/development.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("([0-9]+) scenarios \\(the `Test\\*` functions of `test/e2e`").FindSubmatch(dev)
	if m == nil {
		t.Fatal("docs/development.md does not state the e2e scenario count as \"N scenarios (the `Test*` functions of `test/e2e`\"")
	}
	if string(m[1]) != fmt.Sprint(n) {
		t.Errorf("docs/development.md says %s e2e scenarios; test/e2e has %d Test functions (TestMain takes *testing.M): fix the figure", m[1], n)
	}
}
