//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// The examples the README names run here as written, so that they cannot
// rot: a scenario reads the file and changes only what this cluster needs,
// each example's comment says what.

// fromExample decodes examples/name strictly (an unknown field fails the
// scenario, as kubectl's --validate=strict would) into obj, a Job, a Pod or
// a DeferPolicy, and adapts it to the scenario: its namespace; every stage
// URL's bucket and endpoint (exampleURL), the scenario's MinIO; the
// credentials Secret it names, the scenario's "minio"; every container's
// image, the cluster's busybox; and a security context meeting Pod Security
// "restricted", which the namespace enforces. The URLs' paths, the
// placeholders and every other field and annotation stay.
func (s *scenario) fromExample(name string, obj client.Object) {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
	if err != nil {
		s.t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		s.t.Fatalf("examples/%s: %v", name, err)
	}
	obj.SetNamespace(s.ns)
	var spec *corev1.PodSpec
	switch o := obj.(type) {
	case *v1.DeferPolicy:
		if so := o.Spec.StageOut; so != nil {
			so.URL = s.exampleURL(name, so.URL)
		}
		for i := range o.Spec.TriggerRules {
			if r := &o.Spec.TriggerRules[i]; r.URL != "" {
				r.URL = s.exampleURL(name, r.URL)
			}
		}
		for i := range o.Spec.StageIn {
			o.Spec.StageIn[i].URL = s.exampleURL(name, o.Spec.StageIn[i].URL)
		}
		if o.Spec.Credentials != nil {
			o.Spec.Credentials.Name = "minio"
		}
		return
	case *batchv1.Job:
		spec = &o.Spec.Template.Spec
	case *corev1.Pod:
		spec = &o.Spec
	default:
		s.t.Fatalf("fromExample: %T", obj)
	}
	ann := obj.GetAnnotations()
	if u, ok := ann[v1.AnnotationStageOut]; ok {
		ann[v1.AnnotationStageOut] = s.exampleURL(name, u)
	}
	if u, ok := ann[v1.AnnotationStageIn]; ok {
		urls := strings.Split(u, ",")
		for i := range urls {
			urls[i] = s.exampleURL(name, strings.TrimSpace(urls[i]))
		}
		ann[v1.AnnotationStageIn] = strings.Join(urls, ",")
	}
	if _, ok := ann[v1.AnnotationCredentials]; ok {
		ann[v1.AnnotationCredentials] = "minio"
	}
	obj.SetAnnotations(ann)
	for i := range spec.Containers {
		spec.Containers[i].Image = clusterenv.MustImage(s.t, "busybox")
		spec.Containers[i].ImagePullPolicy = corev1.PullIfNotPresent
	}
	restrictedPod(spec, jobUser, jobUser, jobUser)
}

// exampleURL is an example's stage URL u, an s3:// URL without parameters,
// in the scenario's bucket on its MinIO, with u's path.
func (s *scenario) exampleURL(name, u string) string {
	s.t.Helper()
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "s3" || p.RawQuery != "" {
		s.t.Fatalf("examples/%s: stage URL %q: want an s3:// URL without parameters (%v)", name, u, err)
	}
	return "s3://" + bucket + p.Path + s.s3Query()
}

// waitJobPodStarted waits until a pod of the Job runs or has run, and
// returns its name: a pod that exits at once can go from Pending to
// Succeeded in one status update of a busy kubelet, never seen Running.
func (s *scenario) waitJobPodStarted(job string, timeout time.Duration) string {
	s.t.Helper()
	return s.waitJobPodIn(job, "started", timeout, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed)
}

// waitJobPodRunning waits until a pod of the Job runs and returns its name.
func (s *scenario) waitJobPodRunning(job string, timeout time.Duration) string {
	s.t.Helper()
	return s.waitJobPodIn(job, "running", timeout, corev1.PodRunning)
}

// waitJobPodIn waits until a pod of the Job is in one of phases (what
// names them) and returns its name.
func (s *scenario) waitJobPodIn(job, what string, timeout time.Duration, phases ...corev1.PodPhase) string {
	s.t.Helper()
	var name string
	err := clusterenv.WaitFor(s.ctx, timeout, "a pod of Job "+job+" "+what, func(context.Context) (bool, error) {
		for _, p := range s.podsOf(job) {
			if slices.Contains(phases, p.Status.Phase) {
				name = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.logf("pod %s %s", name, what)
	return name
}

// waitLog waits until the pod's log has a line containing line.
func (s *scenario) waitLog(pod, line string, timeout time.Duration) {
	s.t.Helper()
	err := clusterenv.WaitFor(s.ctx, timeout, "pod "+pod+" to log "+line, func(ctx context.Context) (bool, error) {
		b, err := s.env.Clientset.CoreV1().Pods(s.ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && strings.Contains(string(b), line), nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.logf("pod %s logged %q", pod, line)
}

// checkExample checks an example's outputs under prefix: exactly the keys
// want (besides the manifest and the logs it lists), the manifest's record
// of them (checkManifest), and, where the pod wrote a SHA256SUMS with them,
// every byte of each file it names.
func (s *scenario) checkExample(prefix string, trigger v1.Trigger, want ...string) map[string]object {
	s.t.Helper()
	objs := s.objects(prefix)
	s.checkManifest(prefix, objs, want, trigger)
	for _, k := range want {
		if filepath.Base(k) != "SHA256SUMS" {
			continue
		}
		dir := strings.TrimSuffix(k, "SHA256SUMS")
		lines := strings.Split(strings.TrimSpace(string(objs[k].data)), "\n")
		if len(lines) != len(want)-1 {
			s.t.Errorf("%s has %d lines, want one per other output (%d)", k, len(lines), len(want)-1)
		}
		for _, line := range lines {
			f := strings.Fields(line)
			if len(f) != 2 {
				s.t.Errorf("%s: line %q", k, line)
				continue
			}
			o, ok := objs[dir+f[1]]
			h := sha256.Sum256(o.data)
			if !ok || hex.EncodeToString(h[:]) != f[0] {
				s.t.Errorf("%s line %q: the stored %s (found %v) has sha256 %x", k, line, dir+f[1], ok, h)
			}
		}
	}
	return objs
}
