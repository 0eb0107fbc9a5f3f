//go:build e2e

package e2e

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// TestPrePull: the stage image is on the node before the defer pod is
// made, read from the node's containerd, not inferred from a pre-pull pod
// existing. The image is first removed from the node (a node of its own:
// the other scenarios' defer pods need it), then a Job's pod runs and waits;
// the image must appear while it still waits, with no defer pod yet. The
// same on the node with every millicore of its allocatable CPU requested
// (the Job's own container requests what is left): a pre-pull pod that
// requested CPU was refused OutOfcpu there by the kubelet (issue #37).
func TestPrePull(t *testing.T) {
	node := reserveNode(t, nodeDisk)
	for _, full := range []bool{false, true} {
		name := map[bool]string{false: "idle", true: "fullcpu"}[full]
		t.Run(name, func(t *testing.T) {
			s := newScenario(t, "prepull-"+name, onNode(node))
			image := s.stageImage()
			s.removeImage(image)
			w := small
			w.mode = "wait 0"
			job := s.job("sim", w)
			if full {
				free := s.freeCPU()
				s.logf("node %s: %s of its allocatable CPU not requested: the Job's pod requests it all", s.node, free.String())
				job.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: free}
			}
			s.create(job)
			start := time.Now()
			pod := s.waitReady(2 * time.Minute)
			if full {
				if free := s.freeCPU(); free.MilliValue() >= 10 {
					t.Fatalf("node %s has %s of CPU not requested with the Job's pod running: not full", s.node, free.String())
				}
			}
			err := clusterenv.WaitFor(s.ctx, 90*time.Second, "image "+image+" on node "+s.node, func(context.Context) (bool, error) {
				return s.imageOnNode(image), nil
			})
			if err != nil {
				s.logPrePullPods()
				t.Fatal(err)
			}
			// The pod still waits for its go signal: nothing has ended,
			// so no defer pod can exist yet.
			if run := s.run(pod); run == nil || run.Status.DeferPodName != "" || run.Status.Trigger != "" {
				t.Fatalf("DeferRun %s: %+v: want armed, with no trigger and no defer pod yet", pod, run)
			}
			s.logf("image %s on node %s %.1fs after the Job's creation, before its pod ended", image, s.node, time.Since(start).Seconds())
			s.logPrePullPods()
			s.sig.release(pod)
			run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
			s.checkOutputs("sim", pod, w, v1.TriggerSucceeded)
			s.volumeReleased(run)
			s.cleanUp("sim")
		})
	}
}

// stageImage is the stage image kdefer pre-pulls: its manager's --stage-image.
func (s *scenario) stageImage() string {
	s.t.Helper()
	p := s.controllerPod()
	if p == nil {
		s.t.Fatal("no kdefer-controller pod")
	}
	for _, c := range p.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--stage-image="); ok {
				return v
			}
		}
	}
	s.t.Fatalf("kdefer-controller pod %s has no --stage-image", p.Name)
	return ""
}

// nodeImages are the image records (name -> target digest) in the
// scenario's node's containerd, CRI namespace.
func (s *scenario) nodeImages() map[string]string {
	s.t.Helper()
	out, err := s.env.Cluster(s.ctx, "ctr", "--node", s.node, "images", "ls")
	if err != nil {
		s.t.Fatal(err)
	}
	images := map[string]string{}
	for _, line := range strings.Split(string(out), "\n")[1:] { // REF TYPE DIGEST SIZE PLATFORMS LABELS
		if f := strings.Fields(line); len(f) >= 3 {
			images[f[0]] = f[2]
		}
	}
	return images
}

// imageNames are the names containerd may hold image under: itself, and
// for a reference pinned to a digest (NAME:TAG@DIGEST, as the e2e registry's
// images are) NAME@DIGEST, the one name the CRI records for such a pull.
func imageNames(image string) []string {
	names := []string{image}
	if name, digest, ok := strings.Cut(image, "@"); ok {
		if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
			name = name[:i]
		}
		names = append(names, name+"@"+digest)
	}
	return names
}

// imageDigest is the target digest of image in the scenario's node's
// containerd, if it is there under any of its names.
func (s *scenario) imageDigest(image string, images map[string]string) (string, bool) {
	for _, n := range imageNames(image) {
		if d, ok := images[n]; ok {
			return d, true
		}
	}
	return "", false
}

func (s *scenario) imageOnNode(image string) bool {
	_, ok := s.imageDigest(image, s.nodeImages())
	return ok
}

// removeImage removes image from the scenario's node's containerd: the
// tag and every other record of the same manifest (its repo@digest and
// the CRI's sha256: ID), so the kubelet pulls it again.
func (s *scenario) removeImage(image string) {
	s.t.Helper()
	images := s.nodeImages()
	digest, ok := s.imageDigest(image, images)
	if !ok {
		s.logf("image %s not on node %s (its images: %v)", image, s.node, slices.Sorted(maps.Keys(images)))
		return
	}
	args := []string{"ctr", "--node", s.node, "images", "rm", "--sync"}
	for ref, d := range images {
		if d == digest {
			args = append(args, ref)
		}
	}
	if _, err := s.env.Cluster(s.ctx, args...); err != nil {
		s.t.Fatal(err)
	}
	if s.imageOnNode(image) {
		s.t.Fatalf("image %s still on node %s after removing %v", image, s.node, args[6:])
	}
	s.logf("image %s removed from node %s (%d records)", image, s.node, len(args)-6)
}

// freeCPU is the CPU of the scenario's node's allocatable that no pod
// which has not ended requests (what the kubelet's admission compares a
// new pod's requests with).
func (s *scenario) freeCPU() resource.Quantity {
	s.t.Helper()
	n, err := s.env.Clientset.CoreV1().Nodes().Get(s.ctx, s.node, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	pods, err := s.env.Clientset.CoreV1().Pods("").List(s.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + s.node})
	if err != nil {
		s.t.Fatal(err)
	}
	free := n.Status.Allocatable.Cpu().DeepCopy()
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			free.Sub(podCPU(p))
		}
	}
	return free
}

// podCPU is the CPU a pod requests as the kubelet counts it: its
// containers and native sidecars, or its largest init container with the
// sidecars started before it if that is more, plus its overhead.
func podCPU(p *corev1.Pod) resource.Quantity {
	var sum, sidecars, initMax resource.Quantity
	for _, c := range p.Spec.Containers {
		sum.Add(*c.Resources.Requests.Cpu())
	}
	for _, c := range p.Spec.InitContainers {
		q := c.Resources.Requests.Cpu().DeepCopy()
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars.Add(q)
			continue
		}
		q.Add(sidecars)
		if q.Cmp(initMax) > 0 {
			initMax = q
		}
	}
	sum.Add(sidecars)
	if initMax.Cmp(sum) > 0 {
		sum = initMax
	}
	sum.Add(*p.Spec.Overhead.Cpu())
	return sum
}

// logPrePullPods logs the scenario's pre-pull pods: phase, reason, message.
func (s *scenario) logPrePullPods() {
	pods, err := s.env.Clientset.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: v1.LabelManaged + "=" + controller.LabelManagedPrePull})
	if err != nil {
		s.t.Log(err)
		return
	}
	for _, p := range pods.Items {
		s.logf("pre-pull pod %s on %s: %s %s %s (requests %v)", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Reason, p.Status.Message, p.Spec.Containers[0].Resources.Requests)
	}
}
