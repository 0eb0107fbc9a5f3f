package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kdefer/kdefer/stagecontract"
)

func TestCombineCRC32C(t *testing.T) {
	data := bytes.Repeat([]byte("kdefer stage engine "), 5000)
	tab := crc32.MakeTable(crc32.Castagnoli)
	for _, cut := range []int{0, 1, 7, 4096, len(data) - 1, len(data)} {
		a, b := data[:cut], data[cut:]
		got := CombineCRC32C(crc32.Checksum(a, tab), crc32.Checksum(b, tab), int64(len(b)))
		if want := crc32.Checksum(data, tab); got != want {
			t.Errorf("cut %d: combined %08x, want %08x", cut, got, want)
		}
	}
}

func FuzzCombineCRC32C(f *testing.F) {
	f.Add([]byte("hello"), []byte("world"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		tab := crc32.MakeTable(crc32.Castagnoli)
		got := CombineCRC32C(crc32.Checksum(a, tab), crc32.Checksum(b, tab), int64(len(b)))
		if want := crc32.Checksum(append(append([]byte{}, a...), b...), tab); got != want {
			t.Fatalf("combined %08x, want %08x", got, want)
		}
	})
}

func TestChecksumFormat(t *testing.T) {
	for _, c := range []uint32{0, 1, 0xdeadbeef, 0xffffffff} {
		got, err := ParseChecksum(FormatChecksum(c))
		if err != nil || got != c {
			t.Errorf("round trip %08x: %08x, %v", c, got, err)
		}
	}
	for _, bad := range []string{"", "crc32c:", "crc32c:123", "crc32c:DEADBEEF", "md5:deadbeef", "crc32c:deadbeef0", "crc32c:-0000001"} {
		if _, err := ParseChecksum(bad); err == nil {
			t.Errorf("ParseChecksum(%q) accepted", bad)
		}
	}
}

func TestCheckRel(t *testing.T) {
	tests := []struct {
		rel string
		ok  bool
	}{
		{"a", true}, {"a/b/c.txt", true}, {"ünïcode/名前", true}, {"a b/c", true}, {"..a/b..", true},
		{"", false}, {"/a", false}, {"a/", false}, {"a//b", false}, {".", false}, {"..", false},
		{"a/../b", false}, {"a/./b", false}, {"../a", false}, {"a\\b", false}, {"a\x00b", false},
		{"a\nb", false}, {"\xff", false}, {"_kdefer/manifest.json", false}, {"_kdefer", false},
		{"x/_kdefer/manifest.json", true}, {strings.Repeat("a", 256), false},
	}
	for _, tc := range tests {
		if err := CheckRel(tc.rel); (err == nil) != tc.ok {
			t.Errorf("CheckRel(%q) = %v, want ok=%v", tc.rel, err, tc.ok)
		}
	}
	if _, _, err := KeyFor("p/", strings.Repeat("a/", 600)+"x"); err == nil || ClassOf(err) != Permanent {
		t.Errorf("KeyFor(too long) = %v, want a permanent error", err)
	}
	if _, err := RelFor("p/", "q/x"); err == nil {
		t.Errorf("RelFor outside the prefix accepted")
	}
	if rel, err := RelFor("p/", "p/a/b"); err != nil || rel != "a/b" {
		t.Errorf("RelFor = %q, %v", rel, err)
	}
}

// FuzzCheckRel: whatever CheckRel accepts is a plain downward path that
// stays inside any directory it is joined to.
func FuzzCheckRel(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "a/../../b", "/abs", "a//b", "ok.txt", "_kdefer/x", "a\\..\\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		if CheckRel(rel) != nil {
			return
		}
		if strings.HasPrefix(rel, "/") || strings.Contains(rel, "\\") || strings.ContainsRune(rel, 0) {
			t.Fatalf("accepted %q", rel)
		}
		for _, seg := range strings.Split(rel, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("accepted %q with segment %q", rel, seg)
			}
		}
		key, encoded, err := KeyFor("prefix/", rel)
		if err == nil && !encoded {
			if back, err := RelFor("prefix/", key); err != nil || back != rel {
				t.Fatalf("KeyFor/RelFor round trip of %q: %q, %v", rel, back, err)
			}
		}
	})
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestExpandTemplate(t *testing.T) {
	e := env(map[string]string{"KDEFER_NAMESPACE": "ns", "KDEFER_JOB": "job-1", "KDEFER_POD": "job-1-abc", "KDEFER_INDEX": "3",
		"KDEFER_TRIGGER": "OOMKilled", "KDEFER_UID": "0f1e-22", "KDEFER_NODE": "node.a", "BAD": "x"})
	tests := []struct {
		in, want, err string
	}{
		{"s3://b/{namespace}/{job}/{pod}/{index}/{trigger}/{uid}?endpoint=http://h:1", "s3://b/ns/job-1/job-1-abc/3/OOMKilled/0f1e-22?endpoint=http://h:1", ""},
		{"file:///x/{node}", "file:///x/node.a", ""},
		{"no placeholders", "no placeholders", ""},
		{"{nope}", "", "unknown"},
		{"{pod", "", "unterminated"},
		{"pod}", "", "unmatched"},
		{"{{pod}}", "", "unterminated"},
	}
	for _, tc := range tests {
		got, err := ExpandTemplate(tc.in, e)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ExpandTemplate(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ExpandTemplate(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, v := range []string{"", "..", ".", "a/b", "a?b", "a b", "a%2f"} {
		if _, err := ExpandTemplate("s3://b/{pod}", env(map[string]string{"KDEFER_POD": v})); err == nil {
			t.Errorf("value %q accepted", v)
		}
	}
}

func FuzzExpandTemplate(f *testing.F) {
	f.Add("s3://b/{namespace}/{pod}/x", "ns", "pod-1")
	f.Add("{pod}{pod}", "a", "..")
	f.Fuzz(func(t *testing.T, tmpl, ns, pod string) {
		out, err := ExpandTemplate(tmpl, env(map[string]string{"KDEFER_NAMESPACE": ns, "KDEFER_POD": pod}))
		if err != nil {
			return
		}
		// Expanded values never add separators, dot segments or braces.
		if strings.Count(out, "/") != strings.Count(tmpl, "/") {
			t.Fatalf("expansion of %q added a '/': %q", tmpl, out)
		}
		if strings.ContainsAny(out, "{}") {
			t.Fatalf("expansion of %q left braces: %q", tmpl, out)
		}
		if !strings.Contains(tmpl, "{") && out != tmpl {
			t.Fatalf("template without placeholders changed: %q -> %q", tmpl, out)
		}
	})
}

func validManifest() *stagecontract.Manifest {
	return &stagecontract.Manifest{Version: 1, Tool: "kdefer-stage test", Prefix: "s3://b/p/", TotalBytes: 3,
		Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC),
		Files: []stagecontract.ManifestFile{{Key: "a/b", Size: 3, Checksum: FormatChecksum(0x1234), ModTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}}
}

func TestParseManifest(t *testing.T) {
	data, err := validManifest().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(validManifest(), m); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	good := string(data)
	bad := map[string]string{
		"hostile key":   strings.Replace(good, `"a/b"`, `"../b"`, 1),
		"absolute key":  strings.Replace(good, `"a/b"`, `"/etc/passwd"`, 1),
		"reserved key":  strings.Replace(good, `"a/b"`, `"_kdefer/manifest.json"`, 1),
		"bad checksum":  strings.Replace(good, FormatChecksum(0x1234), "crc32c:zz", 1),
		"bad adler32":   strings.Replace(good, `"checksum"`, `"checksums": {"adler32": "xyz"}, "checksum"`, 1),
		"unknown sum":   strings.Replace(good, `"checksum"`, `"checksums": {"sha1": "00"}, "checksum"`, 1),
		"negative size": strings.Replace(strings.Replace(good, `"size": 3`, `"size": -3`, 1), `"totalBytes": 3`, `"totalBytes": -3`, 1),
		"wrong total":   strings.Replace(good, `"totalBytes": 3`, `"totalBytes": 4`, 1),
		"version":       strings.Replace(good, `"version": 1`, `"version": 2`, 1),
		"unknown field": strings.Replace(good, `"version": 1`, `"version": 1, "x": 1`, 1),
		"trailing":      good + "{}",
		"not json":      "nope",
	}
	for name, s := range bad {
		if s == good {
			t.Fatalf("%s: replacement did not apply", name)
		}
		if _, err := ParseManifest([]byte(s)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	dup := validManifest()
	dup.Files = append(dup.Files, dup.Files[0])
	dup.TotalBytes = 6
	data, _ = dup.Marshal()
	if _, err := ParseManifest(data); err == nil {
		t.Errorf("duplicate key accepted")
	}
}

func FuzzParseManifest(f *testing.F) {
	data, _ := validManifest().Marshal()
	f.Add(data)
	f.Add([]byte(`{"version":1,"files":[{"key":"../x","size":1,"checksum":"crc32c:00000000"}],"totalBytes":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		var total int64
		for _, fl := range m.Files {
			if CheckRel(fl.Key) != nil || fl.Size < 0 {
				t.Fatalf("accepted file %+v", fl)
			}
			if _, err := ParseChecksum(fl.Checksum); err != nil {
				t.Fatalf("accepted checksum %q", fl.Checksum)
			}
			total += fl.Size
		}
		if total != m.TotalBytes {
			t.Fatalf("accepted total %d != %d", m.TotalBytes, total)
		}
		// What parses must survive a round trip.
		again, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseManifest(again); err != nil {
			t.Fatalf("re-parse: %v", err)
		}
	})
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		raw  string
		want Location
		err  string
	}{
		{raw: "s3://bkt/a/b?endpoint=http://127.0.0.1:9000", want: Location{Scheme: "s3", Bucket: "bkt", Prefix: "a/b/", Query: url.Values{"endpoint": {"http://127.0.0.1:9000"}}}},
		{raw: "s3://bkt", want: Location{Scheme: "s3", Bucket: "bkt", Query: url.Values{}}},
		{raw: "file:///data/out", want: Location{Scheme: "file", Bucket: "/data/out", Query: url.Values{}}},
		{raw: "mem://x/p/", want: Location{Scheme: "mem", Bucket: "x", Prefix: "p/", Query: url.Values{}}},
		{raw: "s3://key:secret@bkt/p", err: "carries credentials"},
		{raw: "ftp://x/y", err: "not supported"},
		{raw: "/just/a/path", err: "no scheme"},
		{raw: "file://relative/x", err: "has a host"},
		{raw: "s3:///p", err: "no bucket"},
		{raw: "s3://b/a/../../x", err: "prefix"},
		{raw: "s3://b/p%zz", err: "malformed"},
	}
	for _, tc := range tests {
		got, err := ParseURL(tc.raw)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || ClassOf(err) != Permanent {
				t.Errorf("ParseURL(%q) err = %v, want permanent %q", tc.raw, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("ParseURL(%q) error leaks the secret: %v", tc.raw, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.raw, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseURL(%q) (-want +got):\n%s", tc.raw, diff)
		}
	}
}

func TestRedact(t *testing.T) {
	tests := map[string]string{
		"s3://AKIA:secret@bucket/p/x?endpoint=http://h&token=abc": "s3://bucket/p/x",
		"https://u:p@host:9000/path?X-Amz-Signature=zz":           "https://host:9000/path",
		"file:///data/out": "file:///data/out",
		"user:pw@host":     "host",
	}
	for in, want := range tests {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSplitManifestURL(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"s3://b/run/_kdefer/manifest.json?endpoint=x", "s3://b/run/?endpoint=x", true},
		{"file:///d/_kdefer/manifest.json", "file:///d/", true},
		{"s3://b/run/", "s3://b/run/", false},
		{"s3://b/run/_kdefer/manifest.jsonx", "s3://b/run/_kdefer/manifest.jsonx", false},
	}
	for _, tc := range tests {
		got, ok := SplitManifestURL(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("SplitManifestURL(%q) = %q %v, want %q %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want Class
	}{
		{syscall.ECONNRESET, Transient},
		{syscall.ECONNREFUSED, Transient},
		{syscall.ENOSPC, Permanent},
		{context.DeadlineExceeded, Transient},
		{fmt.Errorf("x: %w", ErrNotExist), Permanent},
		{Usagef("bad"), Usage},
		{WithOp("op", Permanentf("fix", "bad")), Permanent},
	}
	for _, tc := range tests {
		if got := ClassOf(tc.err); got != tc.want {
			t.Errorf("ClassOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRetry(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	var waits []time.Duration
	p := RetryPolicy{Attempts: 4, Base: 100 * time.Millisecond, Max: 250 * time.Millisecond, Clock: clk,
		Rand: func() float64 { return 0.5 }, OnRetry: func(_ int, w time.Duration, _ error) { waits = append(waits, w) }}
	var calls atomic.Int32
	done := make(chan error)
	go func() {
		done <- p.Do(context.Background(), func(context.Context) error {
			calls.Add(1)
			return syscall.ECONNRESET
		})
	}()
	// Advance the fake clock whenever the retry loop waits on it.
	for {
		select {
		case err := <-done:
			if !errors.Is(err, syscall.ECONNRESET) || calls.Load() != 4 {
				t.Fatalf("Do = %v after %d calls, want ECONNRESET after 4", err, calls.Load())
			}
			// Full jitter at 0.5 of 100ms, 200ms, then the 250ms cap.
			if diff := cmp.Diff([]time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 125 * time.Millisecond}, waits); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
			return
		default:
			if clk.HasWaiters() {
				clk.Step(time.Second)
			} else {
				runtime.Gosched()
			}
		}
	}
}

func TestRetryStopsOnPermanent(t *testing.T) {
	calls := 0
	err := RetryPolicy{Attempts: 5, Clock: clocktesting.NewFakeClock(time.Now())}.Do(context.Background(), func(context.Context) error {
		calls++
		return Permanentf("fix it", "denied")
	})
	if err == nil || calls != 1 {
		t.Errorf("Do = %v after %d calls, want the permanent error after 1", err, calls)
	}
}
