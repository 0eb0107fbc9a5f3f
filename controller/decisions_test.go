package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/podstate"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

var t0 = kt.T0

func finished(typ, reason string, at time.Time) []metav1.Condition {
	return []metav1.Condition{{Type: typ, Status: metav1.ConditionTrue, Reason: reason, LastTransitionTime: metav1.NewTime(at)}}
}

func TestShouldRelease(t *testing.T) {
	run := func(f func(*v1.DeferRun)) *v1.DeferRun {
		r := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Obj()
		f(r)
		return r
	}
	type want struct {
		Release bool
		Due     time.Time
	}
	cases := map[string]struct {
		run  *v1.DeferRun
		want want
	}{
		"succeeded": {run(func(r *v1.DeferRun) { r.Status.Conditions = finished(v1.DeferRunSucceeded, "Succeeded", t0) }), want{Release: true}},
		"skipped":   {run(func(r *v1.DeferRun) { r.Status.Conditions = finished(v1.DeferRunSkipped, "x", t0) }), want{Release: true}},
		"failed, default Retain": {run(func(r *v1.DeferRun) {
			r.Status.Conditions = finished(v1.DeferRunFailed, "x", t0)
		}), want{}},
		"failed, Release": {run(func(r *v1.DeferRun) {
			r.Status.Conditions = finished(v1.DeferRunFailed, "x", t0)
			r.Spec.Policy.OnFailure = &v1.OnFailure{Volume: v1.VolumeRelease}
		}), want{Release: true}},
		"failed, retainFor not yet due": {run(func(r *v1.DeferRun) {
			r.Status.Conditions = finished(v1.DeferRunFailed, "x", t0.Add(-time.Minute))
			r.Spec.Policy.OnFailure = &v1.OnFailure{Volume: v1.VolumeRetain, RetainFor: &metav1.Duration{Duration: time.Hour}}
		}), want{Due: t0.Add(59 * time.Minute)}},
		"failed, retainFor due": {run(func(r *v1.DeferRun) {
			r.Status.Conditions = finished(v1.DeferRunFailed, "x", t0.Add(-2*time.Hour))
			r.Spec.Policy.OnFailure = &v1.OnFailure{Volume: v1.VolumeRetain, RetainFor: &metav1.Duration{Duration: time.Hour}}
		}), want{Release: true, Due: t0.Add(-time.Hour)}},
		"failed, released by hand": {run(func(r *v1.DeferRun) {
			r.Status.Conditions = finished(v1.DeferRunFailed, "x", t0)
			r.Annotations = map[string]string{v1.AnnotationRelease: "true"}
		}), want{Release: true}},
		"succeeded incomplete, default Retain": {run(func(r *v1.DeferRun) {
			r.Status.Conditions = append(finished(v1.DeferRunSucceeded, "Succeeded", t0), finished(v1.DeferRunIncomplete, v1.ReasonUnsavedFiles, t0)...)
		}), want{}},
		"succeeded incomplete, retainFor not yet due": {run(func(r *v1.DeferRun) {
			r.Status.Conditions = append(finished(v1.DeferRunSucceeded, "Succeeded", t0), finished(v1.DeferRunIncomplete, v1.ReasonUnsavedFiles, t0)...)
			r.Spec.Policy.OnFailure = &v1.OnFailure{Volume: v1.VolumeRetain, RetainFor: &metav1.Duration{Duration: time.Hour}}
		}), want{Due: t0.Add(time.Hour)}},
		"succeeded incomplete, released by hand": {run(func(r *v1.DeferRun) {
			r.Status.Conditions = append(finished(v1.DeferRunSucceeded, "Succeeded", t0), finished(v1.DeferRunIncomplete, v1.ReasonUnsavedFiles, t0)...)
			r.Annotations = map[string]string{v1.AnnotationRelease: "true"}
		}), want{Release: true}},
		"failed, run deleted": {run(func(r *v1.DeferRun) {
			r.Status.Conditions = finished(v1.DeferRunFailed, "x", t0)
			r.DeletionTimestamp = &metav1.Time{Time: t0}
		}), want{Release: true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rel, due := ShouldRelease(tc.run, t0)
			if diff := cmp.Diff(tc.want, want{rel, due}); diff != "" {
				t.Errorf("ShouldRelease (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTTLExpiry(t *testing.T) {
	base := func(ttl *int32, conds ...metav1.Condition) *v1.DeferRun {
		r := kt.MakeRun("p", "ns").Obj()
		r.Spec.Policy.TTLSecondsAfterFinished = ttl
		r.Status.Conditions = conds
		r.Status.CompletionTime = &metav1.Time{Time: t0}
		return r
	}
	ok := metav1.Condition{Type: v1.DeferRunSucceeded, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}
	failed := metav1.Condition{Type: v1.DeferRunFailed, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}
	released := func(at time.Time) metav1.Condition {
		return metav1.Condition{Type: v1.DeferRunVolumeReleased, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}
	}
	retained := metav1.Condition{Type: v1.DeferRunVolumeReleased, Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(t0)}
	type want struct {
		At time.Time
		OK bool
	}
	cases := map[string]struct {
		run  *v1.DeferRun
		want want
	}{
		"not finished":                  {kt.MakeRun("p", "ns").Obj(), want{}},
		"succeeded, released, ttl 60":   {base(ptr.To[int32](60), ok, released(t0)), want{t0.Add(time.Minute), true}},
		"ttl 0":                         {base(ptr.To[int32](0), ok, released(t0)), want{t0, true}},
		"released after finishing":      {base(ptr.To[int32](60), failed, released(t0.Add(time.Hour))), want{t0.Add(61 * time.Minute), true}},
		"failed, volume retained: kept": {base(ptr.To[int32](60), failed, retained), want{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			at, ok := TTLExpiry(tc.run)
			if diff := cmp.Diff(tc.want, want{at, ok}); diff != "" {
				t.Errorf("TTLExpiry (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJudgeNode(t *testing.T) {
	ready := func(s corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s}}}}
	}
	run := kt.MakeRun("p", "ns").Policy(func(p *v1.DeferPolicySpec) { p.NodeLostTimeout = &metav1.Duration{Duration: 10 * time.Minute} }).Obj()
	type verdict struct{ Ready, Lost bool }
	cases := map[string]struct {
		node *corev1.Node
		now  time.Time
		want verdict
	}{
		"ready":                    {ready(corev1.ConditionTrue), t0, verdict{Ready: true}},
		"not ready, waiting":       {ready(corev1.ConditionUnknown), t0.Add(5 * time.Minute), verdict{}},
		"not ready, timeout":       {ready(corev1.ConditionFalse), t0.Add(10 * time.Minute), verdict{Lost: true}},
		"gone, waiting":            {nil, t0.Add(time.Minute), verdict{}},
		"gone, timeout":            {nil, t0.Add(11 * time.Minute), verdict{Lost: true}},
		"no Ready condition (new)": {&corev1.Node{}, t0, verdict{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := JudgeNode(tc.node, run, t0, tc.now)
			if diff := cmp.Diff(tc.want, verdict{v.Ready, v.Lost}); diff != "" {
				t.Errorf("JudgeNode (-want +got):\n%s (%s)", diff, v.Message)
			}
			if !v.Ready && !v.Lost && (v.RetryAt.Before(tc.now) || v.RetryAt.After(t0.Add(10*time.Minute))) {
				t.Errorf("RetryAt %v outside (now, deadline]", v.RetryAt)
			}
		})
	}
}

func TestObserve(t *testing.T) {
	run := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
		p.DeferContainers = []corev1.Container{{Name: "hook", Image: "x"}}
	}).Obj()
	pod := func(f func(*corev1.Pod)) *corev1.Pod {
		p := BuildDeferPod(run, DeferPodOptions{StageImage: "img"})
		f(p)
		return p
	}
	sum := &stagecontract.StageSummary{Op: "out", Bytes: 10, Objects: 2, ManifestURL: "s3://b/m"}
	type got struct {
		Done, Failed bool
		Reason       string
		Summary      bool
	}
	cases := map[string]struct {
		pod  *corev1.Pod
		want got
	}{
		"not started":            {pod(func(p *corev1.Pod) {}), got{}},
		"all ok":                 {pod(func(p *corev1.Pod) { kt.FinishDeferPod(p, 0, 0, sum, false) }), got{Done: true, Summary: true}},
		"permanent error exit 3": {pod(func(p *corev1.Pod) { kt.FinishDeferPod(p, 3, 0, sum, false) }), got{Done: true, Failed: true, Reason: v1.ReasonPermanentError, Summary: true}},
		"usage error exit 2":     {pod(func(p *corev1.Pod) { kt.FinishDeferPod(p, 2, 0, nil, false) }), got{Done: true, Failed: true, Reason: v1.ReasonPermanentError}},
		"transient, retrying":    {pod(func(p *corev1.Pod) { kt.FinishDeferPod(p, 1, 2, sum, false) }), got{Summary: true}},
		"transient, retries exhausted": {pod(func(p *corev1.Pod) { kt.FinishDeferPod(p, 1, 4, sum, false) }),
			got{Done: true, Failed: true, Reason: v1.ReasonRetriesExhausted, Summary: true}},
		"deadline": {pod(func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason = corev1.PodFailed, "DeadlineExceeded"
		}), got{Done: true, Failed: true, Reason: v1.ReasonDeadlineExceeded}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := Observe(tc.pod, 3)
			if diff := cmp.Diff(tc.want, got{o.Done, o.Failed, o.Reason, o.Summary != nil}); diff != "" {
				t.Errorf("Observe (-want +got):\n%s (%s)", diff, o.Message)
			}
			if len(o.Steps) != 2 || o.Steps[0].Name != v1.StageOutStepName || o.Steps[1].Name != "hook" {
				t.Errorf("steps %+v", o.Steps)
			}
		})
	}
}

func TestAdoptedOwners(t *testing.T) {
	pod := kt.MakePod("p", "ns").Obj()
	run := kt.MakeRun("p", "ns").Obj()
	pvc := kt.ClaimFor(pod, v1.DefaultWorkVolumeName)
	runRef := runOwnerRef(run, false)
	cases := map[string]struct {
		refs        []metav1.OwnerReference
		podDeleting bool
		want        []metav1.OwnerReference
		changed     bool
	}{
		"second owner added":                  {pvc.OwnerReferences, false, append(append([]metav1.OwnerReference{}, pvc.OwnerReferences...), runRef), true},
		"already co-owned":                    {append(append([]metav1.OwnerReference{}, pvc.OwnerReferences...), runRef), false, append(append([]metav1.OwnerReference{}, pvc.OwnerReferences...), runRef), false},
		"pod deleting: replaced":              {pvc.OwnerReferences, true, []metav1.OwnerReference{runRef}, true},
		"pod deleting, co-owned: pod dropped": {append(append([]metav1.OwnerReference{}, pvc.OwnerReferences...), runRef), true, []metav1.OwnerReference{runRef}, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := pvc.DeepCopy()
			p.OwnerReferences = tc.refs
			got, changed := AdoptedOwners(p, run, tc.podDeleting)
			if diff := cmp.Diff(tc.want, got); diff != "" || changed != tc.changed {
				t.Errorf("AdoptedOwners changed=%v (-want +got):\n%s", changed, diff)
			}
		})
	}
	if *runRef.Controller || *runRef.BlockOwnerDeletion {
		t.Error("the run must be a non-controller owner that does not block deletion")
	}
}

func TestJobSummary(t *testing.T) {
	r := func(typ string) v1.DeferRun {
		run := kt.MakeRun("p", "ns").Obj()
		if typ != "" {
			run.Status.Conditions = finished(typ, "x", t0)
		}
		return *run
	}
	cases := map[string]struct {
		runs []v1.DeferRun
		want string
	}{
		"all staged":  {[]v1.DeferRun{r(v1.DeferRunSucceeded), r(v1.DeferRunSucceeded), r(v1.DeferRunSucceeded)}, "3/3 staged out"},
		"mixed":       {[]v1.DeferRun{r(v1.DeferRunSucceeded), r(v1.DeferRunFailed), r(v1.DeferRunSkipped), r("")}, "1/4 staged out, 1 failed, 1 skipped, 1 pending"},
		"none staged": {[]v1.DeferRun{r(v1.DeferRunFailed)}, "0/1 staged out, 1 failed"},
		"one incomplete": {[]v1.DeferRun{r(v1.DeferRunSucceeded), func() v1.DeferRun {
			run := r(v1.DeferRunSucceeded)
			run.Status.Conditions = append(run.Status.Conditions, finished(v1.DeferRunIncomplete, v1.ReasonUnsavedFiles, t0)...)
			return run
		}()}, "2/2 staged out, 1 incomplete"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, JobSummary(tc.runs)); diff != "" {
				t.Errorf("JobSummary (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildRun(t *testing.T) {
	pod := kt.MakePod("p", "ns").OnNode("n1").OwnedByJob("j", "job-uid").Annotation(v1.AnnotationPolicy, "pol").Annotation("other", "x").
		RunAsUser(1000).ContainerRunAsGroup("main", 1000).FSGroup(2000).SupplementalGroups(3000).Obj()
	pod.Labels["app"] = "x"
	pod.Annotations[batchv1.JobCompletionIndexAnnotation] = "7"
	run := BuildRun(pod, "pol", v1.DeferPolicySpec{}, "")
	stripped, _ := podstate.StripPod(pod.DeepCopy())
	if diff := cmp.Diff(run, BuildRun(stripped.(*corev1.Pod), "pol", v1.DeferPolicySpec{}, "")); diff != "" {
		t.Errorf("BuildRun of the cached (stripped) pod differs (-full +stripped):\n%s", diff)
	}
	if run.Spec.CompletionIndex == nil || *run.Spec.CompletionIndex != 7 {
		t.Errorf("completion index %v", run.Spec.CompletionIndex)
	}
	if run.Name != "p" || run.Spec.JobName != "j" || run.Spec.PodUID != pod.UID {
		t.Errorf("run %+v", run.Spec)
	}
	// No owner: a foreground deletion of the Job would take the PVC with it.
	if len(run.OwnerReferences) != 0 || run.Labels[labelJobUID] != "job-uid" || run.Labels[v1.LabelJobName] != "j" {
		t.Errorf("owners %v labels %v", run.OwnerReferences, run.Labels)
	}
	if diff := cmp.Diff(map[string]string{}, run.Annotations); diff != "" {
		t.Errorf("annotations: none copied without a config error (-want +got):\n%s", diff)
	}
	withErr := BuildRun(pod, "pol", v1.DeferPolicySpec{}, "policy missing")
	if diff := cmp.Diff(map[string]string{v1.AnnotationPolicy: "pol", v1.AnnotationStageOut: "s3://bucket/{namespace}/{pod}/", annotationConfigError: "policy missing"}, withErr.Annotations); diff != "" {
		t.Errorf("annotations with a config error: kdefer's configuration is copied (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&v1.StageUser{RunAsUser: ptr.To(int64(1000)), RunAsGroup: ptr.To(int64(1000)), SupplementalGroups: []int64{1000, 2000, 3000}}, run.Spec.StageUser); diff != "" {
		t.Errorf("stage user (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]v1.RetainedVolume{{Name: v1.DefaultWorkVolumeName, ClaimName: "p-kdefer-work"}}, run.Spec.Volumes); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
}
