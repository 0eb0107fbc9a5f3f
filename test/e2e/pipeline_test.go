//go:build e2e

package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// TestPipeline: examples/pipeline as written, two Jobs chained by a URL.
//
//  1. simulate writes its event files one a second; its first attempt is
//     evicted (Eviction API) after the third. kdefer stages that attempt
//     out to simulate/attempts/POD/ (trigger Drained) and the Job retries.
//  2. The retry completes: kdefer stages it out to simulate/output/, the
//     prefix the policy's Succeeded rule names, and commits it (manifest).
//  3. reconstruct, created once `kdefer wait job/simulate` says every run
//     is final, stages in simulate/output/ by its URL template: exactly the
//     files the successful attempt committed, none of the evicted one's;
//     its container checks them against the simulation's SHA256SUMS, and
//     records what it consumed.
//  4. One byte of one committed object flipped in the bucket: the next
//     reconstruction's stage-in fails permanently (exit 3) naming the
//     object, and its main container never runs.
func TestPipeline(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "pipeline")
	pol := &v1.DeferPolicy{}
	s.fromExample("pipeline/01-policy.yaml", pol)
	s.create(pol)
	sim := &batchv1.Job{}
	s.fromExample("pipeline/02-simulate.yaml", sim)
	s.create(sim)

	// 1. The first attempt, evicted mid-run.
	first := s.waitJobPodRunning("simulate", 2*time.Minute)
	s.waitLog(first, "event file 03 of 10 written", time.Minute)
	if err := s.env.Evict(s.ctx, s.ns, first); err != nil {
		t.Fatalf("evict %s: %v", first, err)
	}
	s.waitFinished(first, v1.TriggerDrained, v1.DeferRunSucceeded, 3*time.Minute)

	// 2. The retry completes; the pipeline's driver waits for every run.
	s.kdefer("wait", "job/simulate", "--timeout", "4m")
	s.waitJob("simulate", time.Minute, "complete", jobComplete)
	second := s.succeededPod("simulate")
	if second == first {
		t.Fatalf("the evicted pod %s succeeded", first)
	}
	s.waitFinished(second, v1.TriggerSucceeded, v1.DeferRunSucceeded, time.Minute)
	simOut := s.ns + "/simulate/output/"
	evicted := s.objects(s.ns + "/simulate/attempts/" + first + "/")
	s.checkManifest(s.ns+"/simulate/attempts/"+first+"/", evicted, nil, v1.TriggerDrained)
	for _, k := range []string{"logs/" + first + ".log", "provenance.txt", "events/run-01.dat", "events/run-03.dat"} {
		if _, ok := evicted[k]; !ok {
			t.Errorf("the evicted attempt's %s is not under simulate/attempts/%s/", k, first)
		}
	}
	if _, ok := evicted["SHA256SUMS"]; ok {
		t.Errorf("the evicted attempt %s wrote SHA256SUMS: it was not stopped mid-run", first)
	}
	outputs := []string{"SHA256SUMS", "provenance.txt", "logs/" + second + ".log"}
	for i := 1; i <= 10; i++ {
		outputs = append(outputs, fmt.Sprintf("events/run-%02d.dat", i))
	}
	committed := s.checkExample(simOut, v1.TriggerSucceeded, outputs...)
	if m := s.manifestOf(committed); m.Identity["pod"] != second {
		t.Errorf("simulate/output/ committed by pod %q, want the attempt that succeeded, %s", m.Identity["pod"], second)
	}
	if o := s.objects(s.ns + "/simulate/attempts/" + second + "/"); len(o) > 0 {
		t.Errorf("the succeeded attempt %s staged out under attempts/ too: %d objects", second, len(o))
	}

	// 3. The next stage consumes exactly the committed outputs.
	reco := &batchv1.Job{}
	s.fromExample("pipeline/03-reconstruct.yaml", reco)
	again := reco.DeepCopy()
	s.create(reco)
	s.kdefer("wait", "job/reconstruct", "--timeout", "3m")
	s.waitJob("reconstruct", time.Minute, "complete", jobComplete)
	recoPod := s.succeededPod("reconstruct")
	s.waitFinished(recoPod, v1.TriggerSucceeded, v1.DeferRunSucceeded, time.Minute)
	stageIn, err := s.env.PodLogs(s.ctx, s.ns, recoPod, render.StageInContainerName)
	if err != nil || !strings.Contains(stageIn, "stage in committed outputs") || !strings.Contains(stageIn, second) || strings.Contains(stageIn, first) {
		t.Errorf("stage-in of %s (%v): want committed outputs of %s, not %s:\n%s", recoPod, err, second, first, stageIn)
	}
	histograms := []string{"out/consumed.txt"}
	for i := 1; i <= 10; i++ {
		histograms = append(histograms, fmt.Sprintf("out/histograms/run-%02d.txt", i))
	}
	recoObjs := s.checkExample(s.ns+"/reconstruct/output/", v1.TriggerSucceeded, histograms...)
	if got, want := string(recoObjs["out/consumed.txt"].data), consumed(committed); got != want {
		t.Errorf("reconstruct consumed:\n%s\nwant exactly what the successful simulation committed:\n%s", got, want)
	}
	if strings.Contains(string(recoObjs["out/consumed.txt"].data), first) {
		t.Errorf("reconstruct consumed a file of the evicted attempt %s", first)
	}
	s.logf("reconstruct consumed the %d files %s committed, none of %s's", len(outputs)-1, second, first)

	// 4. A flipped byte in a committed object fails the next stage-in.
	const corrupt = "events/run-05.dat"
	s.flipByte(simOut+corrupt, 100)
	again.Name = "reconstruct-again"
	s.create(again)
	s.waitJob(again.Name, 3*time.Minute, "failed", func(j *batchv1.Job) bool {
		return jobCondition(j, batchv1.JobFailed)
	})
	pods := s.podsOf(again.Name)
	if len(pods) != 1 {
		t.Fatalf("Job %s has %d pods, want 1 (backoffLimit 0)", again.Name, len(pods))
	}
	failed := &pods[0]
	in := initStatus(failed, render.StageInContainerName)
	switch {
	case in == nil || in.State.Terminated == nil:
		t.Errorf("pod %s: stage-in %+v, want terminated", failed.Name, in)
	case in.State.Terminated.ExitCode != 3 || !strings.Contains(in.State.Terminated.Message, corrupt):
		t.Errorf("pod %s: stage-in exit %d, message %q; want 3 (permanent) naming %s", failed.Name, in.State.Terminated.ExitCode, in.State.Terminated.Message, corrupt)
	default:
		s.logf("pod %s: stage-in exit 3: %s", failed.Name, strings.TrimSpace(in.State.Terminated.Message))
	}
	for _, c := range failed.Status.ContainerStatuses {
		if c.State.Running != nil || (c.State.Terminated != nil && !c.State.Terminated.StartedAt.IsZero()) {
			t.Errorf("pod %s: container %s ran on corrupt inputs", failed.Name, c.Name)
		}
	}
	s.waitFinished(failed.Name, v1.TriggerFailed, v1.DeferRunSucceeded, 2*time.Minute)
	s.cleanUp("simulate", "reconstruct", again.Name)
}

// kdefer runs the CLI against the scenario's namespace and fails the test
// unless it exits 0.
func (s *scenario) kdefer(args ...string) {
	s.t.Helper()
	cmd := exec.CommandContext(s.ctx, program(s.t, "./cmd/kdefer"), append([]string{"--kubeconfig", clusterenv.Dir() + "/kubeconfig", "-n", s.ns}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("kdefer %s: %v:\n%s", strings.Join(args, " "), err, out)
	}
	s.logf("kdefer %s:\n%s", strings.Join(args, " "), out)
}

// succeededPod is the name of the Job's one pod that succeeded.
func (s *scenario) succeededPod(job string) string {
	s.t.Helper()
	var names []string
	for _, p := range s.podsOf(job) {
		if p.Status.Phase == corev1.PodSucceeded {
			names = append(names, p.Name)
		}
	}
	if len(names) != 1 {
		s.t.Fatalf("Job %s: succeeded pods %v, want one", job, names)
	}
	return names[0]
}

// manifestOf parses the manifest among objs.
func (s *scenario) manifestOf(objs map[string]object) *stagecontract.Manifest {
	s.t.Helper()
	m, err := storage.ParseManifest(objs[stagecontract.ManifestKey].data)
	if err != nil {
		s.t.Fatalf("manifest: %v", err)
	}
	return m
}

// flipByte inverts the byte at off of the object key in the bucket, as a
// store's fault or a tamperer would, leaving its size alone.
func (s *scenario) flipByte(key string, off int) {
	s.t.Helper()
	o, err := s.mc.GetObject(s.ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	var b bytes.Buffer
	_, err = b.ReadFrom(o)
	o.Close()
	if err != nil || b.Len() <= off {
		s.t.Fatalf("get %s: %d bytes, %v", key, b.Len(), err)
	}
	data := b.Bytes()
	data[off] ^= 0xff
	if _, err := s.mc.PutObject(s.ctx, bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.logf("flipped byte %d of s3://%s/%s", off, bucket, key)
}

// consumed is the sha256sum listing reconstruct writes of its inputs: every
// file the simulation committed but SHA256SUMS, by name.
func consumed(committed map[string]object) string {
	var names []string
	for k := range committed {
		if k != "SHA256SUMS" && !strings.HasPrefix(k, stagecontract.ReservedDir) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		h := sha256.Sum256(committed[k].data)
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h[:]), k)
	}
	return b.String()
}

func jobComplete(j *batchv1.Job) bool { return jobCondition(j, batchv1.JobComplete) }

func jobCondition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// initStatus is the status of the pod's init container name, nil if none.
func initStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}
