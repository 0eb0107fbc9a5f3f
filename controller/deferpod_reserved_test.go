package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

// A policy stored before admission refused it (or a DeferRun written by
// hand) may give its defer containers mounts of the defer pod's volumes
// that are kdefer's: the logs token, the stage step's /tmp, the S3 CA
// bundle. The builder leaves those mounts out, whatever the policy says
// and wherever the defer container stands (first of all when there is no
// stage-out step, where the token's volume must then not exist at all);
// mounts of the work volume stay.
func TestDeferPodNoReservedVolumesForDeferContainers(t *testing.T) {
	opts := DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:test",
		Logs: LogsEndpoint{URL: "https://kdefer-webhook.kdefer-system.svc" + stagecontract.LogsPath, CA: func() []byte { return []byte("CA") }}}
	peek := corev1.Container{Name: "peek", Image: "x", VolumeMounts: []corev1.VolumeMount{
		{Name: "kdefer-logs-token", MountPath: "/token"},
		{Name: "kdefer-tmp", MountPath: "/stage-tmp"},
		{Name: "kdefer-s3-ca", MountPath: "/ca"},
		{Name: v1.DefaultWorkVolumeName, MountPath: "/data"},
	}}
	unvalidated := func(stageOut bool) *v1.DeferRun {
		return kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
			p.S3 = &v1.S3Settings{CABundle: &v1.CABundleSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}, Key: "ca.pem"}}}
			p.DeferContainers = []corev1.Container{peek, {Name: "last", Image: "x"}}
			if !stageOut {
				p.StageOut = nil
			}
		}).Obj()
	}
	for name, run := range map[string]*v1.DeferRun{
		"after the stage-out step": unvalidated(true),
		"first, with no stage-out": unvalidated(false),
	} {
		t.Run(name, func(t *testing.T) {
			pod := BuildDeferPod(run, opts)
			builtIn := map[string]bool{v1.StageOutStepName: true, v1.StageLogsName: true}
			found := false
			for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
				if builtIn[c.Name] {
					continue
				}
				for _, m := range c.VolumeMounts {
					if m.Name == "kdefer-logs-token" || m.Name == "kdefer-tmp" || m.Name == "kdefer-s3-ca" {
						t.Errorf("defer container %s mounts kdefer's volume %s", c.Name, m.Name)
					}
				}
				if c.Name == "peek" {
					found = true
					if !mountsVolume(&c, map[string]bool{v1.DefaultWorkVolumeName: true}) || c.VolumeMounts[len(c.VolumeMounts)-1].MountPath != "/data" {
						t.Errorf("peek's own mount of the work volume was not kept: %+v", c.VolumeMounts)
					}
				}
			}
			if !found {
				t.Fatal("the defer container is missing from the pod")
			}
			if run.Spec.Policy.StageOut == nil {
				for _, v := range pod.Spec.Volumes {
					if v.Name == "kdefer-logs-token" || v.Name == "kdefer-s3-ca" {
						t.Errorf("with no stage step, the pod still has kdefer's volume %s", v.Name)
					}
				}
			}
		})
	}
}

// A run armed with such a policy (before admission refused it) gets its
// defer pod without those mounts, and says so in a Warning event naming
// each mount and the fix, on the run and on its Job.
func TestDeferPodReservedMountsRecorded(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	w := newFakeWorld(t, job, pod, pvc, n)
	rec := events.NewFakeRecorder(50)
	w.run.recorder = rec
	w.settle()
	run := w.getRun()
	run.Spec.Policy.DeferContainers = []corev1.Container{{Name: "peek", Image: "x",
		VolumeMounts: []corev1.VolumeMount{{Name: "kdefer-logs-token", MountPath: "/token"}, {Name: "kdefer-tmp", MountPath: "/stage-tmp"}}}}
	if err := w.base.Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Failed().Obj().Status })
	w.settle()

	dp := &corev1.Pod{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, dp); err != nil {
		t.Fatalf("defer pod: %v", err)
	}
	last := dp.Spec.Containers[len(dp.Spec.Containers)-1]
	if last.Name != "peek" || len(last.VolumeMounts) != 1 || last.VolumeMounts[0].Name != v1.DefaultWorkVolumeName {
		t.Errorf("defer container %s mounts %+v, want the work volume alone", last.Name, last.VolumeMounts)
	}
	var got []string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, v1.EventReservedMounts) {
			got = append(got, e)
		}
	}
	if len(got) != 2 {
		t.Fatalf("events %q, want one %s on the run and one on the Job", got, v1.EventReservedMounts)
	}
	for _, want := range []string{"Warning " + v1.EventReservedMounts, "fix the DeferPolicy",
		`spec.policy.deferContainers[0].volumeMounts[0].name: Forbidden: "kdefer-logs-token" is reserved for kdefer`,
		`spec.policy.deferContainers[0].volumeMounts[1].name: Forbidden: "kdefer-tmp" is reserved for kdefer`} {
		if !strings.Contains(got[0], want) {
			t.Errorf("event %q lacks %q", got[0], want)
		}
	}
}

// A DeferPolicy stored before admission refused such mounts arms runs that
// wait with ConfigError (reason InvalidPolicy, admission's words and fix),
// as for any configuration only the user can fix; none mounts anything.
func TestStoredPolicyWithReservedMounts(t *testing.T) {
	job, pod, pvc, n := worldObjects()
	pod.Annotations = map[string]string{v1.AnnotationPolicy: "old"}
	stored := rt.MakePolicy("old", "ns", "s3://b/{pod}/").DeferContainer(corev1.Container{Name: "peek", Image: "x",
		VolumeMounts: []corev1.VolumeMount{{Name: "kdefer-logs-token", MountPath: "/token"}}}).Obj()
	w := newFakeWorld(t, job, pod, pvc, n, stored)
	w.settle()
	w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Failed().Obj().Status })
	w.settle()
	run := w.getRun()
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunConfigError)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1.ReasonInvalidPolicy ||
		!strings.Contains(c.Message, `deferContainers[0].volumeMounts[0].name: Forbidden: "kdefer-logs-token" is reserved for kdefer`) {
		t.Errorf("ConfigError %+v, want True, %s, naming the mount and the fix", c, v1.ReasonInvalidPolicy)
	}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, &corev1.Pod{}); err == nil {
		t.Error("a defer pod was created for a run whose policy is invalid")
	}
}
