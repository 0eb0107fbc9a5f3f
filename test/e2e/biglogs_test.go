//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// The big log: bigLogLines lines of bigLineLen bytes, each its 8-digit
// number, a space, 'x's and a newline (numbered, so that a head or tail
// taken from the wrong place, or a rotated part lost, shows), printed in
// chunks of bigLogChunk lines with a pause between them, then bigLogEnd.
const (
	bigLineLen  = 4096
	bigLogLines = 51200 // 200 MiB
	bigLogChunk = 2560  // 10 MiB, the kubelet's containerLogMaxSize
	bigLogEnd   = "printed 51200 lines of 4096 bytes: the end\n"
)

// bigLogSize is the length of what the container prints.
const bigLogSize = bigLogLines*bigLineLen + int64(len(bigLogEnd))

// bigLogBytes is n bytes of what the container prints, from off.
func bigLogBytes(off, n int64) []byte {
	out := make([]byte, 0, n)
	line := bytes.Repeat([]byte{'x'}, bigLineLen)
	line[8], line[bigLineLen-1] = ' ', '\n'
	for off < bigLogLines*bigLineLen && int64(len(out)) < n {
		copy(line, fmt.Sprintf("%08d", off/bigLineLen))
		c := min(bigLineLen-off%bigLineLen, n-int64(len(out)))
		out = append(out, line[off%bigLineLen:off%bigLineLen+c]...)
		off += c
	}
	if rest := n - int64(len(out)); rest > 0 {
		from := off - bigLogLines*bigLineLen
		out = append(out, bigLogEnd[from:from+rest]...)
	}
	return out
}

// TestBigRotatedLog: a Job's container prints 200 MiB to stdout in 4 KiB
// lines, paced so that the kubelet, checking every 3 s, rotates its log at
// 10Mi a dozen times and, keeping 3 files, deletes the earlier parts while
// the container runs (test/cluster/kubelet.yaml); then it prints a last
// line and exits 0. The node agent kept every part: the archived main.log
// is the stream's first 2.5 MiB, the marker line and its last 7.5 MiB, byte
// for byte (the default maxBytes, 10Mi), and its manifest entry says the
// container printed exactly bigLogSize bytes and which ones the object
// holds; no log warning. It exits rather than being evicted so that what it
// printed is known to the byte: an evicted container's last line depends on
// when the kill lands. Nothing is mirrored in the volume (say's mirror
// would be 200 MiB): checkMirroredLogs compares nothing here, and the
// expected bytes come from bigLogBytes.
func TestBigRotatedLog(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "biglogs")
	w := small
	w.mode = "exit 0" // its command is replaced below
	job := s.job("big", w)
	job.Spec.Template.Spec.Containers[0].Command[2] = fmt.Sprintf(`set -e
timeout 30 wget -q -O /dev/null %[1]s/ready/$HOSTNAME
mkdir -p /kdefer/out
pad=$(head -c %[2]d /dev/zero | tr '\0' x)
i=0
while [ $i -lt %[3]d ]; do
  awk -v from=$i -v n=%[4]d -v pad="$pad" 'BEGIN { for (j = from; j < from + n; j++) printf "%%08d %%s\n", j, pad }'
  i=$((i + %[4]d))
  echo $i >/kdefer/out/lines
  sleep 2
done
printf '%%s' '%[5]s'
`, s.sig.url, bigLineLen-10, bigLogLines, bigLogChunk, bigLogEnd)
	s.create(job)
	pod := s.waitReady(2 * time.Minute)
	// 20 chunks, 2 s apart, and the stage-out reading 200 MiB from the agent.
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 5*time.Minute)
	s.kubeletRotated(pod)

	prefix := s.ns + "/big/" + pod + "/"
	objs := s.objects(prefix)
	s.checkManifest(prefix, objs, []string{"out/lines"}, v1.TriggerSucceeded)
	if got := string(objs["out/lines"].data); got != fmt.Sprintf("%d\n", bigLogLines) {
		t.Errorf("out/lines = %q, want %d lines printed", got, bigLogLines)
	}
	m, err := storage.ParseManifest(objs[stagecontract.ManifestKey].data)
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	key := stagecontract.LogKey(pod, stagecontract.LogRef{Container: "main"})
	var entry *stagecontract.ManifestFile
	for i := range m.Logs {
		if m.Logs[i].Key == key {
			entry = &m.Logs[i]
		}
	}
	if entry == nil {
		t.Fatalf("manifest lists no %s (logs %+v, warnings %+v)", key, m.Logs, m.LogWarnings)
	}
	maxQ := mustQ(v1.DefaultLogsMaxBytes)
	maxBytes := maxQ.Value()
	head, tailBytes := maxBytes/4, maxBytes-maxBytes/4
	want := stagecontract.LogTruncation{OriginalSize: bigLogSize, HeadBytes: head, TailBytes: tailBytes}
	if entry.Truncated == nil || *entry.Truncated != want {
		t.Fatalf("%s: truncated = %+v, want %+v: the container printed %d bytes", key, entry.Truncated, want, bigLogSize)
	}
	got := objs[key].data
	exp := append(append(bigLogBytes(0, head), stagecontract.LogTruncationMarker(bigLogSize-maxBytes, maxBytes)...), bigLogBytes(bigLogSize-tailBytes, tailBytes)...)
	if !bytes.Equal(got, exp) {
		i := 0
		for i < min(len(got), len(exp)) && got[i] == exp[i] {
			i++
		}
		t.Fatalf("%s: %d bytes, want %d (head %d, marker, tail %d): first difference at byte %d (%q, want %q)", key, len(got), len(exp),
			head, tailBytes, i, got[i:min(len(got), i+40)], exp[i:min(len(exp), i+40)])
	}
	s.logf("%s: the first %d and last %d of the %d bytes printed, byte for byte, the cut in the manifest", key, head, tailBytes, bigLogSize)
	s.volumeReleased(run)
	s.cleanUp("big")
}

// kubeletRotated checks that the kubelet rotated main's log and deleted its
// first parts, so that the archive's head came from the node agent's links:
// what the kubelet still serves of the ended container (its current file
// alone) is a small part of the stream and does not start with line 0.
func (s *scenario) kubeletRotated(pod string) {
	s.t.Helper()
	rc, err := s.env.Clientset.CoreV1().Pods(s.ns).GetLogs(pod, &corev1.PodLogOptions{Container: "main"}).Stream(s.ctx)
	if err != nil {
		s.t.Fatalf("kubelet's log of %s: %v", pod, err)
	}
	defer rc.Close()
	first := make([]byte, 9)
	n, _ := io.ReadFull(rc, first)
	rest, err := io.Copy(io.Discard, rc)
	if err != nil {
		s.t.Fatalf("read the kubelet's log of %s: %v", pod, err)
	}
	size := int64(n) + rest
	if size >= bigLogSize/2 || strings.HasPrefix(string(first[:n]), "00000000 ") {
		s.t.Fatalf("the kubelet serves %d of the %d bytes printed, from %q: it did not rotate the log (test/cluster/kubelet.yaml containerLogMaxSize)", size, bigLogSize, first[:n])
	}
	s.logf("the kubelet kept %d of the %d bytes printed, from line %q: it rotated the log and deleted the rest", size, bigLogSize, first[:n])
}
