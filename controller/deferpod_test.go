package controller

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/podstate"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

func TestBuildDeferPod(t *testing.T) {
	opts := DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:test"}
	hook := corev1.Container{Name: "notify", Image: "curl", Command: []string{"notify"}}
	type shape struct {
		Inits, Mains []string
		Args         []string
		EnvFromIn    []string // steps that get envFrom
		NodeName     string
		Deadline     int64
		Restart      corev1.RestartPolicy
		Owner        string
	}
	names := func(cs []corev1.Container) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	shapeOf := func(p *corev1.Pod) *shape {
		if p == nil {
			return nil
		}
		s := &shape{Inits: names(p.Spec.InitContainers), Mains: names(p.Spec.Containers), NodeName: p.Spec.NodeName,
			Deadline: *p.Spec.ActiveDeadlineSeconds, Restart: p.Spec.RestartPolicy, Owner: p.OwnerReferences[0].Kind + "/" + p.OwnerReferences[0].Name}
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			if c.Name == v1.StageOutStepName {
				s.Args = c.Args
			}
			if len(c.EnvFrom) > 0 {
				s.EnvFromIn = append(s.EnvFromIn, c.Name)
			}
		}
		return s
	}
	cases := map[string]struct {
		run  *v1.DeferRun
		want *shape
	}{
		"stage-out only: the only step is the main container": {
			run: kt.MakeRun("p", "ns").Trigger(v1.TriggerSucceeded, 0).Obj(),
			want: &shape{Mains: []string{"stage-out"}, NodeName: "n1", Deadline: 1800, Restart: corev1.RestartPolicyOnFailure, Owner: "DeferRun/p",
				Args: []string{"out", "--volume-root", "/kdefer-work", "--from", "/kdefer-work", "--to", "s3://bucket/{namespace}/{pod}/", "--log-format", "json"}},
		},
		"stage-out then defer containers, credentials only in stage-out": {
			run: kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
				p.DeferContainers = []corev1.Container{hook, {Name: "last", Image: "busybox"}}
				p.Credentials = &corev1.LocalObjectReference{Name: "s3"}
				p.StageOut.Path = "out"
				p.StageOut.Include = []string{"*.root"}
				p.Deadline = &metav1.Duration{Duration: 600e9}
			}).Obj(),
			want: &shape{Inits: []string{"stage-out", "notify"}, Mains: []string{"last"}, NodeName: "n1", Deadline: 600, Restart: corev1.RestartPolicyOnFailure, Owner: "DeferRun/p",
				Args: []string{"out", "--volume-root", "/kdefer-work", "--from", "/kdefer-work/out", "--to", "s3://bucket/{namespace}/{pod}/", "--include", "*.root", "--log-format", "json"}, EnvFromIn: []string{"stage-out"}},
		},
		"trigger rule narrows globs and defer containers": {
			run: kt.MakeRun("p", "ns").Trigger(v1.TriggerOOMKilled, 137).Policy(func(p *v1.DeferPolicySpec) {
				p.DeferContainers = []corev1.Container{hook, {Name: "last", Image: "busybox"}}
				p.TriggerRules = []v1.TriggerRule{{Triggers: []v1.Trigger{v1.TriggerOOMKilled}, Include: []string{"logs/**"}, DeferContainers: []string{"notify"}}}
			}).Obj(),
			want: &shape{Inits: []string{"stage-out"}, Mains: []string{"notify"}, NodeName: "n1", Deadline: 1800, Restart: corev1.RestartPolicyOnFailure, Owner: "DeferRun/p",
				Args: []string{"out", "--volume-root", "/kdefer-work", "--from", "/kdefer-work", "--to", "s3://bucket/{namespace}/{pod}/", "--include", "logs/**", "--log-format", "json"}},
		},
		"trigger rule url: a succeeded pod stages out elsewhere, with the policy's S3 settings": {
			run: kt.MakeRun("p", "ns").Trigger(v1.TriggerSucceeded, 0).Policy(func(p *v1.DeferPolicySpec) {
				p.StageOut.URL = "s3://bucket/{namespace}/{job}/attempts/{pod}/"
				p.S3 = &v1.S3Settings{Region: "eu-west-1"}
				p.TriggerRules = []v1.TriggerRule{{Triggers: []v1.Trigger{v1.TriggerSucceeded}, URL: "s3://bucket/{namespace}/{job}/output/"}}
			}).Obj(),
			want: &shape{Mains: []string{"stage-out"}, NodeName: "n1", Deadline: 1800, Restart: corev1.RestartPolicyOnFailure, Owner: "DeferRun/p",
				Args: []string{"out", "--volume-root", "/kdefer-work", "--from", "/kdefer-work", "--to", "s3://bucket/{namespace}/{job}/output/?region=eu-west-1", "--log-format", "json"}},
		},
		"trigger rule url: other triggers keep stageOut.url": {
			run: kt.MakeRun("p", "ns").Trigger(v1.TriggerDrained, 143).Policy(func(p *v1.DeferPolicySpec) {
				p.StageOut.URL = "s3://bucket/{namespace}/{job}/attempts/{pod}/"
				p.TriggerRules = []v1.TriggerRule{{Triggers: []v1.Trigger{v1.TriggerSucceeded}, URL: "s3://bucket/{namespace}/{job}/output/"}}
			}).Obj(),
			want: &shape{Mains: []string{"stage-out"}, NodeName: "n1", Deadline: 1800, Restart: corev1.RestartPolicyOnFailure, Owner: "DeferRun/p",
				Args: []string{"out", "--volume-root", "/kdefer-work", "--from", "/kdefer-work", "--to", "s3://bucket/{namespace}/{job}/attempts/{pod}/", "--log-format", "json"}},
		},
		"skip rule: no pod": {
			run: kt.MakeRun("p", "ns").Trigger(v1.TriggerPreempted, 143).Policy(func(p *v1.DeferPolicySpec) {
				p.TriggerRules = []v1.TriggerRule{{Triggers: []v1.Trigger{v1.TriggerPreempted}, Action: v1.TriggerActionSkip}}
			}).Obj(),
			want: nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, shapeOf(BuildDeferPod(tc.run, opts))); diff != "" {
				t.Errorf("defer pod (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeferPodInvariants(t *testing.T) {
	run := kt.MakeRun("p", "ns").Trigger(v1.TriggerDrained, 143).Job("j").Policy(func(p *v1.DeferPolicySpec) {
		p.DeferContainers = []corev1.Container{{Name: "hook", Image: "x", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{}}}}}
	}).Obj()
	pod := BuildDeferPod(run, DeferPodOptions{StageImage: "img"})
	wantEnv := map[string]string{stagecontract.EnvTrigger: "Drained", stagecontract.EnvExitCode: "143", stagecontract.EnvPod: "p", stagecontract.EnvJob: "j",
		stagecontract.EnvNamespace: "ns", stagecontract.EnvNode: "n1", stagecontract.EnvUID: "uid-p"}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		got := map[string]string{}
		for _, e := range c.Env {
			if _, ok := wantEnv[e.Name]; ok {
				got[e.Name] = e.Value
			}
		}
		if diff := cmp.Diff(wantEnv, got); diff != "" {
			t.Errorf("step %s env (-want +got):\n%s", c.Name, diff)
		}
		sc := c.SecurityContext
		if sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !*sc.RunAsNonRoot ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("step %s security context = %+v, want restricted", c.Name, sc)
		}
		if c.Name != v1.StageOutStepName && len(c.EnvFrom) > 0 {
			t.Errorf("step %s gets envFrom %v; only stage steps may", c.Name, c.EnvFrom)
		}
		if !mountsVolume(&c, map[string]bool{v1.DefaultWorkVolumeName: true}) {
			t.Errorf("step %s does not mount the work volume", c.Name)
		}
	}
	// The stage step is bounded in memory, with GOMEMLIMIT following the
	// limit, and has room in /tmp for a million files' spilled lists.
	stage := pod.Spec.InitContainers[0]
	if lim, ok := stage.Resources.Limits[corev1.ResourceMemory]; !ok || lim.Cmp(resource.MustParse("128Mi")) <= 0 {
		t.Errorf("stage-out memory limit = %v, want one above kdefer-stage's 128 MiB budget", stage.Resources.Limits)
	}
	var memlimit *corev1.EnvVar
	for i := range stage.Env {
		if stage.Env[i].Name == "GOMEMLIMIT" {
			memlimit = &stage.Env[i]
		}
	}
	if memlimit == nil || memlimit.ValueFrom == nil || memlimit.ValueFrom.ResourceFieldRef == nil ||
		memlimit.ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
		t.Errorf("stage-out GOMEMLIMIT = %+v, want it from limits.memory", memlimit)
	}
	if tmp := pod.Spec.Volumes[0]; tmp.EmptyDir == nil || tmp.EmptyDir.SizeLimit.Cmp(resource.MustParse("1Gi")) < 0 {
		t.Errorf("volume %s = %+v, want an emptyDir of at least 1Gi for the spilled file list", tmp.Name, tmp.VolumeSource)
	}
	if got := pod.Spec.Volumes[1].PersistentVolumeClaim.ClaimName; got != "p-kdefer-work" {
		t.Errorf("claim = %q", got)
	}
	if !*pod.Spec.SecurityContext.RunAsNonRoot {
		t.Error("pod not non-root")
	}
	var noExec *corev1.Toleration
	for i := range pod.Spec.Tolerations {
		if pod.Spec.Tolerations[i].Effect == corev1.TaintEffectNoExecute {
			noExec = &pod.Spec.Tolerations[i]
		}
	}
	if noExec == nil || noExec.TolerationSeconds == nil || *noExec.TolerationSeconds != 600 {
		t.Errorf("NoExecute toleration = %+v, want bounded by nodeLostTimeout (600s)", noExec)
	}
	pdb := BuildDeferPDB(run)
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("PDB selector %v does not match the defer pod's labels %v (%v)", pdb.Spec.Selector, pod.Labels, err)
	}
	other := BuildDeferPDB(kt.MakeRun("q", "ns").Obj())
	if pdb.Name != other.Name || !sel.Matches(labels.Set(BuildDeferPod(kt.MakeRun("q", "ns").Trigger(v1.TriggerFailed, 1).Obj(), DeferPodOptions{}).Labels)) {
		t.Errorf("PDB %s / %s: want one per namespace, matching every defer pod", pdb.Name, other.Name)
	}
	if sel.Matches(labels.Set{v1.LabelManaged: "true"}) {
		t.Error("PDB selector matches managed pods; it must select defer pods only")
	}
	if ma := pdb.Spec.MinAvailable; ma == nil || ma.Type != intstr.Int || ma.IntVal != math.MaxInt32 {
		t.Errorf("minAvailable %v: want the integer MaxInt32 (no eviction allowed, no scale subresource needed)", ma)
	}
	if refs := pdb.OwnerReferences; len(refs) != 1 || refs[0].UID != run.UID || *refs[0].Controller || *refs[0].BlockOwnerDeletion {
		t.Errorf("PDB owners %+v: want the run that created it, non-controller, non-blocking", refs)
	}
}

func TestShorten(t *testing.T) {
	long := "a-very-long-pod-name-" + string(make([]byte, 0)) + "0123456789012345678901234567890123456789012345678901234567890123456789"
	v := v1.LabelValue(long)
	if len(v) != 63 || v == v1.LabelValue(long+"x") {
		t.Errorf("v1.LabelValue(%q) = %q", long, v)
	}
	if v1.LabelValue("short") != "short" {
		t.Error("short names must be kept")
	}
}

// TestStageUser: the built-in stage-out step runs as the user and group
// every regular container of the pod ran as, when known, the same and not
// root, and the defer pod gets the pod's groups; otherwise 65532. Defer
// containers keep what they had. The run is armed from the cached
// (stripped) pod, which must give the same answer as the full one.
func TestStageUser(t *testing.T) {
	type ids struct {
		Stage, Hook *corev1.SecurityContext
		Pod         *corev1.PodSecurityContext
	}
	stage := func(uid, gid *int64) *corev1.SecurityContext {
		return &corev1.SecurityContext{RunAsUser: uid, RunAsGroup: gid, RunAsNonRoot: ptr.To(true),
			ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	}
	podSC := func(groups ...int64) *corev1.PodSecurityContext {
		return &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)), RunAsGroup: ptr.To(int64(65532)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, SupplementalGroups: groups}
	}
	hook := stage(nil, nil) // restricted, the defer pod's user
	want := func(uid, gid *int64, groups ...int64) ids {
		return ids{Stage: stage(uid, gid), Hook: hook, Pod: podSC(groups...)}
	}
	n := func(i int64) *int64 { return &i }
	pod := func() *kt.PodWrapper { return kt.MakePod("p", "ns").Container("second") }
	cases := map[string]struct {
		pod  *corev1.Pod
		want ids
	}{
		"same non-root user and group in every container": {
			pod: pod().ContainerRunAsUser("main", 1000).ContainerRunAsUser("second", 1000).
				ContainerRunAsGroup("main", 1000).ContainerRunAsGroup("second", 1000).Obj(),
			want: want(n(1000), n(1000), 1000),
		},
		"pod-level only": {
			pod:  pod().RunAsUser(1000).RunAsGroup(3000).Obj(),
			want: want(n(1000), n(3000), 3000),
		},
		"containers override a root pod-level user": {
			pod:  pod().RunAsUser(0).ContainerRunAsUser("main", 1000).ContainerRunAsUser("second", 1000).Obj(),
			want: want(n(1000), nil),
		},
		"user known, group not: the defer pod's group": {
			pod:  pod().RunAsUser(1000).ContainerRunAsGroup("main", 1000).Obj(),
			want: want(n(1000), nil, 1000),
		},
		"root": {
			pod:  pod().RunAsUser(0).RunAsGroup(0).Obj(),
			want: want(nil, nil),
		},
		"one container root": {
			pod:  pod().RunAsUser(1000).ContainerRunAsUser("second", 0).Obj(),
			want: want(nil, nil),
		},
		"unset: the image's user, unknown": {
			pod:  pod().Obj(),
			want: want(nil, nil),
		},
		"one container unset": {
			pod:  pod().ContainerRunAsUser("main", 1000).Obj(),
			want: want(nil, nil),
		},
		"containers disagree: 65532 with both groups": {
			pod: pod().ContainerRunAsUser("main", 1000).ContainerRunAsUser("second", 1001).
				ContainerRunAsGroup("main", 1000).ContainerRunAsGroup("second", 1001).Obj(),
			want: want(nil, nil, 1000, 1001),
		},
		"fsGroup and supplementalGroups, sorted, without 0": {
			pod:  pod().RunAsUser(1000).RunAsGroup(1000).FSGroup(2000).SupplementalGroups(3000, 0, 2000).Obj(),
			want: want(n(1000), n(1000), 1000, 2000, 3000),
		},
		"groups of a root pod": {
			pod:  pod().FSGroup(2000).Obj(),
			want: want(nil, nil, 2000),
		},
		"init containers and native sidecars do not count": {
			pod: pod().RunAsUser(1000).InitContainer("setup").Sidecar("proxy").
				ContainerRunAsUser("setup", 0).ContainerRunAsUser("proxy", 1337).ContainerRunAsGroup("proxy", 1337).Obj(),
			want: want(n(1000), nil),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stripped, _ := podstate.StripPod(tc.pod.DeepCopy())
			su := StageUserOf(stripped.(*corev1.Pod))
			if diff := cmp.Diff(StageUserOf(tc.pod), su); diff != "" {
				t.Errorf("StageUserOf the cached (stripped) pod differs (-full +stripped):\n%s", diff)
			}
			run := kt.MakeRun("p", "ns").Trigger(v1.TriggerSucceeded, 0).StageUser(su).Policy(func(p *v1.DeferPolicySpec) {
				p.DeferContainers = []corev1.Container{{Name: "hook", Image: "busybox"}}
			}).Obj()
			p := BuildDeferPod(run, DeferPodOptions{StageImage: "img"})
			got := ids{Stage: p.Spec.InitContainers[0].SecurityContext, Hook: p.Spec.Containers[0].SecurityContext, Pod: p.Spec.SecurityContext}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("security contexts (-want +got):\n%s", diff)
			}
			wantUID := int64(65532)
			if tc.want.Stage.RunAsUser != nil {
				wantUID = *tc.want.Stage.RunAsUser
			}
			if got := StageUID(run); got != wantUID {
				t.Errorf("StageUID = %d, want %d", got, wantUID)
			}
		})
	}
}

// TestDeferPodOwnership: a defer pod is owned by its run's work PVCs when
// all of them are known (so the release's foreground deletion takes it and
// frees the disk), else by the run; either way it is recognised as the run's
// and mapped back to it, and never as another run's. The PVC references
// block their owner's deletion: a foreground delete waits only for blocking
// dependents, and without it the defer pod could outlive the release.
func TestDeferPodOwnership(t *testing.T) {
	pvcRef := func(name, uid string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: name, UID: types.UID(uid),
			Controller: ptr.To(controller), BlockOwnerDeletion: ptr.To(true)}
	}
	pvc := func(name, uid string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid)}}
	}
	twoVolumes := kt.MakeRun("j-x", "ns").Obj()
	twoVolumes.Spec.Volumes = append(twoVolumes.Spec.Volumes, v1.RetainedVolume{Name: "cache", ClaimName: "j-x-cache"})
	for name, tc := range map[string]struct {
		run     *v1.DeferRun
		pvcs    []*corev1.PersistentVolumeClaim
		byVols  bool
		wantRef []metav1.OwnerReference
	}{
		"one work PVC": {run: kt.MakeRun("j-x", "ns").Obj(), pvcs: []*corev1.PersistentVolumeClaim{pvc("j-x-kdefer-work", "u1")},
			byVols: true, wantRef: []metav1.OwnerReference{pvcRef("j-x-kdefer-work", "u1", true)}},
		"two work PVCs": {run: twoVolumes, pvcs: []*corev1.PersistentVolumeClaim{pvc("j-x-kdefer-work", "u1"), pvc("j-x-cache", "u2")},
			byVols: true, wantRef: []metav1.OwnerReference{pvcRef("j-x-kdefer-work", "u1", true), pvcRef("j-x-cache", "u2", false)}},
		"one of two missing: the run's": {run: twoVolumes, pvcs: []*corev1.PersistentVolumeClaim{pvc("j-x-kdefer-work", "u1")},
			wantRef: []metav1.OwnerReference{runOwnerRef(twoVolumes, true)}},
		"none known: the run's": {run: kt.MakeRun("j-x", "ns").Obj(),
			wantRef: []metav1.OwnerReference{runOwnerRef(kt.MakeRun("j-x", "ns").Obj(), true)}},
	} {
		t.Run(name, func(t *testing.T) {
			pod := BuildDeferPod(tc.run, DeferPodOptions{StageImage: "stage"})
			m := map[string]*corev1.PersistentVolumeClaim{}
			for _, p := range tc.pvcs {
				m[p.Name] = p
			}
			if got := OwnByVolumes(pod, tc.run, m); got != tc.byVols {
				t.Errorf("OwnByVolumes = %v, want %v", got, tc.byVols)
			}
			if diff := cmp.Diff(tc.wantRef, pod.OwnerReferences); diff != "" {
				t.Errorf("owners (-want +got):\n%s", diff)
			}
			if metav1.GetControllerOf(pod) == nil {
				t.Error("no controller: kubectl drain would refuse to evict the defer pod instead of waiting")
			}
			if !v1.IsDeferPodOf(pod, tc.run) || v1.DeferPodRun(pod) != tc.run.Name {
				t.Errorf("not recognised as %s's defer pod: %v %q", tc.run.Name, v1.IsDeferPodOf(pod, tc.run), v1.DeferPodRun(pod))
			}
			other := kt.MakeRun("j-x", "ns").Obj()
			other.UID = "a-new-run-of-the-same-name"
			if v1.IsDeferPodOf(pod, other) {
				t.Error("recognised as the defer pod of another run of the same name")
			}
		})
	}
	// A defer pod made before defer pods carried the annotations: owned by
	// its run.
	run := kt.MakeRun("j-x", "ns").Obj()
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "j-x-defer", OwnerReferences: []metav1.OwnerReference{runOwnerRef(run, true)}}}
	if !v1.IsDeferPodOf(old, run) || v1.DeferPodRun(old) != "j-x" {
		t.Error("an older defer pod owned by its run is not recognised")
	}
	if v1.DeferPodRun(&corev1.Pod{}) != "" {
		t.Error("a pod without owner or annotation mapped to a run")
	}
}
