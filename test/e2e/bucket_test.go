//go:build e2e

package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

type object struct {
	info minio.ObjectInfo
	data []byte
}

func (s *scenario) objects(prefix string) map[string]object {
	s.t.Helper()
	out := map[string]object{}
	for o := range s.mc.ListObjects(s.ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			s.t.Fatalf("list s3://%s/%s: %v", bucket, prefix, o.Err)
		}
		r, err := s.mc.GetObject(s.ctx, bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			s.t.Fatalf("get %s: %v", o.Key, err)
		}
		out[strings.TrimPrefix(o.Key, prefix)] = object{o, data}
	}
	return out
}

// checkOutputs checks that everything the pod wrote is in the bucket under
// NAMESPACE/JOB/POD/: every byte of out/f*.dat, SHA256SUMS as the pod
// computed it, and the manifest, listing exactly those objects, written
// last, with the trigger. extra are other keys expected (e.g. inputs).
func (s *scenario) checkOutputs(job, pod string, w workload, trigger v1.Trigger, extra ...string) map[string]object {
	s.t.Helper()
	prefix := s.ns + "/" + job + "/" + pod + "/"
	objs := s.objects(prefix)
	want := map[string]bool{"out/SHA256SUMS": true, stagecontract.ManifestKey: true}
	for _, e := range extra {
		want[e] = true
	}
	sums := map[string]string{}
	for i := range w.files {
		key := fmt.Sprintf("out/f%d.dat", i)
		want[key] = true
		o, ok := objs[key]
		if !ok {
			continue
		}
		if exp := fileContent(i, w.size); !bytes.Equal(o.data, exp) {
			s.t.Errorf("%s: %d bytes differ from the %d the pod wrote", key, len(o.data), len(exp))
		}
		h := sha256.Sum256(o.data)
		sums[fmt.Sprintf("f%d.dat", i)] = hex.EncodeToString(h[:])
	}
	var missing, unexpected []string
	for k := range want {
		if _, ok := objs[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range objs {
		if !want[k] && !strings.HasPrefix(k, stagecontract.LogsDir) && !strings.HasPrefix(k, stdoutMirrorDir) { // logs and their mirrors: checkManifest
			unexpected = append(unexpected, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(unexpected)
	if len(missing) > 0 || len(unexpected) > 0 {
		s.t.Fatalf("s3://%s/%s: missing %v, unexpected %v", bucket, prefix, missing, unexpected)
	}
	// The pod's own checksums match the stored bytes.
	for _, line := range strings.Split(strings.TrimSpace(string(objs["out/SHA256SUMS"].data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || sums[f[1]] != f[0] {
			s.t.Errorf("SHA256SUMS line %q does not match the stored object (sha256 %s)", line, sums[f[1]])
		}
	}
	if n := len(strings.Split(strings.TrimSpace(string(objs["out/SHA256SUMS"].data)), "\n")); n != w.files {
		s.t.Errorf("SHA256SUMS has %d lines, want %d", n, w.files)
	}
	s.checkManifest(prefix, objs, nil, trigger)
	return objs
}

// checkManifest checks the manifest among objs: it lists exactly the other
// objects with their sizes, has the trigger and was written last. want, if
// not nil, are the keys expected besides it.
func (s *scenario) checkManifest(prefix string, objs map[string]object, want []string, trigger v1.Trigger) {
	s.t.Helper()
	if want != nil {
		have := map[string]bool{}
		for k := range objs {
			have[k] = true
		}
		for _, k := range append(want, stagecontract.ManifestKey) {
			if !have[k] {
				s.t.Errorf("s3://%s/%s%s missing", bucket, prefix, k)
			}
			delete(have, k)
		}
		for k := range have {
			if !strings.HasPrefix(k, stagecontract.LogsDir) && !strings.HasPrefix(k, stdoutMirrorDir) { // checked below
				s.t.Errorf("s3://%s/%s%s unexpected", bucket, prefix, k)
			}
		}
	}
	mo, ok := objs[stagecontract.ManifestKey]
	if !ok {
		s.t.Fatalf("no manifest at s3://%s/%s%s", bucket, prefix, stagecontract.ManifestKey)
	}
	m, err := storage.ParseManifest(mo.data)
	if err != nil {
		s.t.Fatalf("manifest: %v", err)
	}
	if m.Trigger != string(trigger) {
		s.t.Errorf("manifest trigger %q, want %q", m.Trigger, trigger)
	}
	listed := map[string]int64{}
	for _, f := range m.Files {
		listed[f.Key] = f.Size
	}
	// The ended pod's logs (stageOut.logs, on by default): listed apart
	// from the outputs, under _kdefer/logs/POD/, every one: the node agent
	// keeps them from the moment the kubelet writes them, so a warning
	// about one is a lost log, whatever ended the pod, unless the scenario
	// says why it may be lost (logsMayBeLost).
	pod := m.Identity["pod"]
	for _, w := range m.LogWarnings {
		if w.Pod != pod || w.Reason == "" {
			s.t.Errorf("manifest log warning %+v: want pod %s and a reason", w, pod)
		}
		if s.logsLost == "" || !strings.Contains(w.Reason, s.logsLost) {
			s.t.Errorf("log of pod %s container %q (previous %v) not archived: %s", w.Pod, w.Container, w.Previous, w.Reason)
			continue
		}
		s.logf("log of %s container %q not archived, as the scenario allows (%s): %s", w.Pod, w.Container, s.logsLost, w.Reason)
	}
	if len(m.LogWarnings) == 0 {
		s.checkMirroredLogs(objs, m)
	}
	// The ended pod's under _kdefer/logs/POD/, the stage step's own under
	// _kdefer/logs/POD-defer/.
	deferPod := m.Identity["pod"] + "-defer"
	selfLog := stagecontract.LogKey(deferPod, stagecontract.LogRef{Container: v1.StageOutStepName})
	for _, l := range m.Logs {
		if !strings.HasPrefix(l.Key, stagecontract.LogsDir+m.Identity["pod"]+"/") && l.Key != selfLog {
			s.t.Errorf("manifest lists log %s, not under %s%s/ nor the stage step's %s", l.Key, stagecontract.LogsDir, m.Identity["pod"], selfLog)
		}
		listed[l.Key] = l.Size
	}
	if _, ok := listed[selfLog]; !ok {
		s.t.Errorf("manifest does not list the stage step's own log %s", selfLog)
	}
	// With defer containers, the stage-logs sidecar archives theirs after
	// the manifest and lists them last, in the steps' list.
	afterManifest := map[string]bool{}
	if sl := s.stepLogs(objs, deferPod); sl != nil {
		lo := objs[stagecontract.StepLogsKey(deferPod)]
		afterManifest[stagecontract.StepLogsKey(deferPod)] = true
		listed[stagecontract.StepLogsKey(deferPod)] = int64(len(lo.data))
		for _, l := range sl.Logs {
			afterManifest[l.Key] = true
			listed[l.Key] = l.Size
			if o, ok := objs[l.Key]; ok && o.info.LastModified.After(lo.info.LastModified) {
				s.t.Errorf("%s written after the steps' list that names it", l.Key)
			}
		}
	}
	for k, o := range objs {
		if k == stagecontract.ManifestKey {
			continue
		}
		if size, ok := listed[k]; !ok || size != int64(len(o.data)) {
			s.t.Errorf("manifest lists %s with size %d (listed %v), object has %d", k, size, ok, len(o.data))
		}
		if !afterManifest[k] && o.info.LastModified.After(mo.info.LastModified) {
			s.t.Errorf("%s (modified %s) written after the manifest (%s)", k, o.info.LastModified.Format(time.StampMilli), mo.info.LastModified.Format(time.StampMilli))
		}
	}
	if len(listed) != len(objs)-1 {
		s.t.Errorf("manifest lists %d files and logs, the prefix holds %d objects besides it", len(listed), len(objs)-1)
	}
	s.logf("s3://%s/%s: %d objects (%d logs, %d log warnings), every byte and checksum right, manifest last", bucket, prefix, len(objs), len(m.Logs), len(m.LogWarnings))
}

// stepLogs is the stage-logs sidecar's list of deferPod's defer
// containers' logs among objs, nil when there is none.
func (s *scenario) stepLogs(objs map[string]object, deferPod string) *stagecontract.StepLogs {
	s.t.Helper()
	o, ok := objs[stagecontract.StepLogsKey(deferPod)]
	if !ok {
		return nil
	}
	var l stagecontract.StepLogs
	if err := json.Unmarshal(o.data, &l); err != nil {
		s.t.Fatalf("%s: %v", stagecontract.StepLogsKey(deferPod), err)
	}
	return &l
}

// checkMirroredLogs compares each archived log of the manifest's pod with
// what its container mirrored into the volume (workload.script's say:
// stdout/C.txt), byte for byte: the previous attempt's log and the last
// one's together are the mirror. say writes the line to stdout first, so a
// container killed between its two writes has one more line in its log
// than in the mirror; that line, and nothing else, may differ. A log cut at
// maxBytes (its entry's truncated) is compared where it has the printed
// bytes, its head and its tail, and its original size with the mirror's. A
// pod whose container mirrored nothing (its script is not workload.script,
// or its trigger rules left stdout/ out) is not compared.
func (s *scenario) checkMirroredLogs(objs map[string]object, m *stagecontract.Manifest) {
	s.t.Helper()
	pod := m.Identity["pod"]
	entries := map[string]stagecontract.ManifestFile{}
	for _, l := range m.Logs {
		entries[l.Key] = l
	}
	for k, mirror := range objs {
		container, ok := strings.CutSuffix(strings.TrimPrefix(k, stdoutMirrorDir), ".txt")
		if !strings.HasPrefix(k, stdoutMirrorDir) || !ok {
			continue
		}
		curKey := stagecontract.LogKey(pod, stagecontract.LogRef{Container: container})
		if _, ok := objs[curKey]; !ok {
			s.t.Errorf("container %s of pod %s printed %d bytes, and its log is not in the bucket", container, pod, len(mirror.data))
			continue
		}
		// The printed stream as the bucket has it: pieces at their offsets.
		var pieces []logPiece
		var length int64
		for _, key := range []string{stagecontract.LogKey(pod, stagecontract.LogRef{Container: container, Previous: true}), curKey} {
			if o, ok := objs[key]; ok {
				p, n := logPieces(o.data, entries[key].Truncated, length)
				pieces, length = append(pieces, p...), length+n
			}
		}
		if why := mirrorDiff(pieces, length, mirror.data); why != "" {
			var last []byte
			if len(pieces) > 0 {
				last = pieces[len(pieces)-1].data
			}
			s.t.Errorf("archived log of %s/%s (%d bytes, ends %q) is not what it printed (%d bytes, ends %q): %s",
				pod, container, length, tail(last), len(mirror.data), tail(mirror.data), why)
			continue
		}
		more := ""
		if extra := length - int64(len(mirror.data)); extra > 0 {
			more = fmt.Sprintf(", and the line it printed as it was killed (%d bytes)", extra)
		}
		s.logf("log of %s/%s: the %d bytes it printed, byte for byte where archived%s", pod, container, len(mirror.data), more)
	}
}

// logPiece is bytes of a container's printed stream at their offset.
type logPiece struct {
	off  int64
	data []byte
}

// logPieces are the bytes of a stream that one archived log, stored as
// data and starting at offset off of the stream, holds, and the log's
// length: all of it, or, cut (t), its head and its tail.
func logPieces(data []byte, t *stagecontract.LogTruncation, off int64) ([]logPiece, int64) {
	if t == nil {
		return []logPiece{{off, data}}, int64(len(data))
	}
	if t.HeadBytes+t.TailBytes > int64(len(data)) {
		return nil, t.OriginalSize // the size check in checkManifest fails it
	}
	return []logPiece{{off, data[:t.HeadBytes]}, {off + t.OriginalSize - t.TailBytes, data[int64(len(data))-t.TailBytes:]}}, t.OriginalSize
}

// mirrorDiff says how a stream of length bytes, of which pieces are known,
// differs from the mirror, or "" when it does not: the mirror is its
// beginning, and what follows is at most one line.
func mirrorDiff(pieces []logPiece, length int64, mirror []byte) string {
	extra := length - int64(len(mirror))
	if extra < 0 {
		return fmt.Sprintf("%d bytes shorter", -extra)
	}
	for _, p := range pieces {
		end := min(p.off+int64(len(p.data)), int64(len(mirror)))
		if p.off < end && !bytes.Equal(p.data[:end-p.off], mirror[p.off:end]) {
			return fmt.Sprintf("bytes %d to %d differ", p.off, end)
		}
		if beyond := p.data[min(int64(len(p.data)), max(0, int64(len(mirror))-p.off)):]; len(beyond) > 0 {
			if bytes.Count(beyond, []byte("\n")) > 1 || !bytes.HasSuffix(beyond, []byte("\n")) {
				return fmt.Sprintf("%q after what it mirrored is not one line", tail(beyond))
			}
		}
	}
	return ""
}

// tail is the end of a log, for a message.
func tail(b []byte) []byte { return b[max(0, len(b)-120):] }

func sortStrings(s []string) { sort.Strings(s) }

// noOutputs checks that nothing was uploaded for the pod.
func (s *scenario) noOutputs(job, pod string) {
	s.t.Helper()
	if objs := s.objects(s.ns + "/" + job + "/" + pod + "/"); len(objs) > 0 {
		var keys []string
		for k := range objs {
			keys = append(keys, k)
		}
		s.t.Errorf("expected no upload for %s, found %v", pod, keys)
	}
}
