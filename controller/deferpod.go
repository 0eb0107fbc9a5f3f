package controller

import (
	"path"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/stagecontract"
)

// Defer pods run as this user; the stage image is built for it.
const deferPodUser int64 = 65532

// stageMemoryLimit is the stage-out step's memory limit.
const stageMemoryLimit = "256Mi"

// DeferPodOptions are the manager-wide inputs of the defer pod builder.
type DeferPodOptions struct {
	// StageImage runs the built-in stage-out step.
	StageImage string
	// ImagePullPolicy of the stage-out step (default IfNotPresent).
	ImagePullPolicy corev1.PullPolicy
	// PriorityClassName of defer pods whose policy names none
	// (kdefer-controller --defer-priority-class; "": none). See
	// DefaultDeferPriorityClass.
	PriorityClassName string
	// MaxDeadline caps every run's deadline, whatever its policy or Job
	// annotation says (kdefer-controller --max-deadline; 0: no cap). The
	// deadline bounds how long a defer pod holds its node: its disruption
	// budget and the eviction guard make `kubectl drain` wait that long.
	MaxDeadline time.Duration
	// Logs is the endpoint stage-out steps fetch the ended pod's logs from.
	Logs LogsEndpoint
	// DeferContainerLimits are the limits of a user defer container that
	// sets none of its own, each resource alone (kdefer-controller
	// --defer-container-memory-limit, --defer-container-cpu-limit; empty:
	// DefaultDeferContainerLimits). Defer pods run at a critical priority,
	// which the kubelet may evict other pods to admit: tenant code there
	// must not take the node's memory or cores without a bound.
	DeferContainerLimits corev1.ResourceList
}

// DefaultDeferContainerLimits bound a user defer container that sets no
// limits: room for an uploader or a notifier, not for a computation.
var DefaultDeferContainerLimits = corev1.ResourceList{
	corev1.ResourceMemory: resource.MustParse("512Mi"),
	corev1.ResourceCPU:    resource.MustParse("1"),
}

// withDefaultLimits gives c each of limits it sets no limit for, and a
// request of zero for each such resource it requests nothing of: otherwise
// the apiserver would default the request to the limit, and a critical pod
// asking for a whole core could be refused on a full node, or make the
// kubelet evict another pod to fit.
func withDefaultLimits(c *corev1.Container, limits corev1.ResourceList) {
	if len(limits) == 0 {
		limits = DefaultDeferContainerLimits
	}
	for name, q := range limits {
		if _, ok := c.Resources.Limits[name]; ok {
			continue
		}
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		c.Resources.Limits[name] = q.DeepCopy()
		if _, ok := c.Resources.Requests[name]; !ok {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[name] = resource.MustParse("0")
		}
	}
}

// EffectiveDeadline is the deadline a run gets: the policy's (default
// DefaultDeadline), capped by max when max > 0.
func EffectiveDeadline(pol *v1.DeferPolicySpec, max time.Duration) time.Duration {
	d := v1.DefaultDeadline
	if pol.Deadline != nil && pol.Deadline.Duration > 0 {
		d = pol.Deadline.Duration
	}
	if max > 0 && d > max {
		d = max
	}
	return d
}

// runDeadline is the deadline run was given when it was triggered
// (status.deadline), or the one it gets now.
func runDeadline(run *v1.DeferRun, opts DeferPodOptions) time.Duration {
	if d := run.Status.Deadline; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return EffectiveDeadline(&run.Spec.Policy, opts.MaxDeadline)
}

// Step is one step of a defer run, in order.
type Step struct {
	Name      string
	Container corev1.Container
}

// Steps returns the steps a run executes for its trigger, in order: the
// built-in stage-out (when the policy has one), then the policy's defer
// containers that the trigger's rule selects. Empty means nothing to run.
// A resumed run leaves out the steps that succeeded before (pendingSteps).
func Steps(run *v1.DeferRun, opts DeferPodOptions) []Step {
	pol := &run.Spec.Policy
	rule := pol.RuleFor(run.Status.Trigger)
	if rule.Action == v1.TriggerActionSkip {
		return nil
	}
	env := stepEnv(run)
	// The user's defer containers find the work volume where the Job's
	// containers had it.
	mountPath := pol.WorkVolume.MountPath
	if mountPath == "" {
		mountPath = v1.DefaultWorkMountPath
	}
	var steps []Step
	if so := pol.StageOut; so != nil && so.URL != "" {
		include, exclude := so.Include, so.Exclude
		if len(rule.Include) > 0 {
			include = rule.Include
		}
		if len(rule.Exclude) > 0 {
			exclude = rule.Exclude
		}
		// The step mounts the work volumes at kdefer's path, not the
		// Job's: at the Job's, kdefer's own mounts (the logs token and CA
		// bundle under /var/run, /tmp) could sit inside the volume the job
		// wrote, or the volume over a directory the step trusts
		// (/etc/ssl/certs). It resolves its source beneath the volume's
		// mount point, so the job cannot link it out (--volume-root).
		// The trigger's rule may send this ending elsewhere (a succeeded
		// pod to the prefix a later Job stages in from).
		args := []string{"out", "--volume-root", render.StageMountPath, "--from", path.Join(render.StageMountPath, so.Path),
			"--to", v1.StageURLWithS3(pol.StageOutURL(run.Status.Trigger), pol.S3)}
		for _, g := range include {
			args = append(args, "--include", g)
		}
		for _, g := range exclude {
			args = append(args, "--exclude", g)
		}
		if so.Overwrite {
			args = append(args, "--overwrite") // replace an earlier attempt's outputs (stageout.Options.Overwrite)
		}
		if so.RequireFiles {
			args = append(args, "--require-files") // no file chosen fails the step (stageout.Options.RequireFiles)
		}
		for _, c := range so.Checksums {
			args = append(args, "--checksums", string(c))
		}
		args = append(args, "--log-format", "json")
		c := corev1.Container{
			Name:                     v1.StageOutStepName,
			Image:                    opts.StageImage,
			ImagePullPolicy:          pullPolicy(opts.ImagePullPolicy),
			Args:                     args, // the image's entrypoint is kdefer-stage
			Env:                      env,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			VolumeMounts:             append(workMounts(run, render.StageMountPath, true), corev1.VolumeMount{Name: v1.TmpVolume, MountPath: "/tmp"}),
			SecurityContext:          restricted(stageSecurityContext(run)),
			Resources: corev1.ResourceRequirements{
				// Requests are zero (admissible says why). The limit is
				// twice the 128 MiB peak RSS that kdefer-stage's TestPeakRSS
				// holds it to. The file list and manifest are spilled to
				// /tmp, so the memory does not grow with the file count
				// (make bench-scale: a million files); GOMEMLIMIT
				// tells the Go collector where the wall is before the
				// kernel does.
				Limits: corev1.ResourceList{corev1.ResourceMemory: mustQ(stageMemoryLimit)},
			},
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{
			ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: c.Name, Resource: "limits.memory"}}})
		if _, m := render.S3CABundle(pol); m != nil {
			c.VolumeMounts = append(c.VolumeMounts, *m)
		}
		if _, m, idEnv := render.WebIdentity(pol); m != nil {
			// The token only in the steps that need it: kdefer's.
			c.VolumeMounts = append(c.VolumeMounts, *m)
			c.Env = append(c.Env, idEnv...)
		}
		withLogs(&c, so, opts.Logs, v1.DeferPodName(run))
		if pol.Credentials != nil && pol.Credentials.Name != "" {
			// Credentials only in the step that needs them.
			c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: pol.Credentials.Name}}}}
		}
		steps = append(steps, Step{Name: c.Name, Container: c})
	}
	selected := map[string]bool{}
	for _, n := range rule.DeferContainers {
		selected[n] = true
	}
	for _, dc := range pol.DeferContainers {
		if len(selected) > 0 && !selected[dc.Name] {
			continue
		}
		c := *dc.DeepCopy()
		c.Env = append(append([]corev1.EnvVar{}, env...), withoutSecret(c.Env, pol.Credentials)...)
		c.EnvFrom = nil // never credentials or other Secrets by reference outside stage steps
		c.Ports = withoutHostPorts(c.Ports)
		c.VolumeMounts = withoutReservedMounts(c.VolumeMounts)
		if !mountsVolume(&c, workVolumeNames(run)) {
			c.VolumeMounts = append(c.VolumeMounts, workMounts(run, mountPath, false)...)
		}
		c.SecurityContext = restricted(c.SecurityContext)
		withDefaultLimits(&c, opts.DeferContainerLimits)
		if c.TerminationMessagePolicy == "" {
			c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
		}
		steps = append(steps, Step{Name: c.Name, Container: c})
	}
	return pendingSteps(steps, &run.Status)
}

// BuildDeferPod returns the pod that runs a triggered DeferRun's steps (the
// trigger and node in its status, as this pass sees it) on the
// dead pod's node, or nil when the trigger runs no step. Every step but the
// last is an init container (they run in order, a failed one is retried by
// the kubelet with backoff under restartPolicy OnFailure); the last is the
// only main container, so the pod completes when it does and is Running (and
// so protected by its PodDisruptionBudget: the Eviction API ignores budgets
// for Pending pods) while the last step, usually the only one, runs.
func BuildDeferPod(run *v1.DeferRun, opts DeferPodOptions) *corev1.Pod {
	steps := Steps(run, opts)
	if len(steps) == 0 {
		return nil
	}
	pol := &run.Spec.Policy
	var inits []corev1.Container
	for _, s := range steps[:len(steps)-1] {
		inits = append(inits, s.Container)
	}
	deadline := int64(runDeadline(run, opts) / time.Second)
	nodeLost := int64(v1.DefaultNodeLostTimeout / time.Second)
	if pol.NodeLostTimeout != nil {
		nodeLost = int64(pol.NodeLostTimeout.Duration / time.Second)
	}
	// /tmp holds the stage-out's spilled file list and manifest (about
	// 400 bytes a file across the three spills): 1 GiB covers a
	// million files with long names. It is a cap the kubelet enforces, not a
	// reservation.
	volumes := []corev1.Volume{{Name: v1.TmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		SizeLimit: ptr.To(mustQ("1Gi"))}}}}
	if v, _ := render.S3CABundle(pol); v != nil && pol.StageOut != nil && pol.StageOut.URL != "" {
		volumes = append(volumes, *v)
	}
	if v, _, _ := render.WebIdentity(pol); v != nil && mountsVolume(&steps[0].Container, map[string]bool{v1.WebIdentityVolume: true}) {
		volumes = append(volumes, *v)
	}
	logsToken := mountsVolume(&steps[0].Container, map[string]bool{v1.LogsTokenVolume: true})
	if logsToken {
		volumes = append(volumes, logsVolume())
		if len(inits) > 0 {
			// Defer containers follow the stage-out step: their logs
			// are archived by a sidecar when the pod ends.
			inits = slices.Insert(inits, 1, logsSidecar(&steps[0].Container))
		}
	}
	for _, rv := range run.Spec.Volumes {
		volumes = append(volumes, corev1.Volume{Name: rv.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: rv.ClaimName}}})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      v1.DeferPodName(run),
			Namespace: run.Namespace,
			Labels: map[string]string{
				v1.LabelManaged:  v1.ManagedDeferPod,
				v1.LabelDeferRun: v1.LabelValue(run.Name),
			},
			Annotations: map[string]string{
				v1.AnnotationDeferRunName: run.Name,
				v1.AnnotationDeferRunUID:  string(run.UID),
			},
			// OwnByVolumes replaces this when the work PVCs are known.
			OwnerReferences: []metav1.OwnerReference{runOwnerRef(run, true)},
		},
		Spec: corev1.PodSpec{
			// The dead pod's node: its volume is bound there, and nodeName
			// bypasses the scheduler and so a cordon.
			NodeName: run.Status.NodeName,
			// The policy's identity: what the web identity token names,
			// and what the kubelet pulls the images with. No API token
			// is mounted (AutomountServiceAccountToken).
			ServiceAccountName:            pol.ServiceAccountName,
			ImagePullSecrets:              slices.Clone(pol.ImagePullSecrets),
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			ActiveDeadlineSeconds:         ptr.To(deadline),
			InitContainers:                inits,
			Containers:                    []corev1.Container{steps[len(steps)-1].Container},
			Volumes:                       volumes,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(30)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To(deferPodUser),
				RunAsGroup:     ptr.To(deferPodUser),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				// Group-readable outputs can be read by every step.
				SupplementalGroups: supplementalGroups(run),
			},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				// NoExecute taints (not-ready, unreachable, drain tooling)
				// are tolerated only as long as the run waits for a node.
				{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(nodeLost)},
			},
		},
	}
	if a := attemptOf(&run.Status); a != "" {
		pod.Annotations[v1.AnnotationAttempt] = a
	}
	if logsToken {
		// The token names the pod's service account: say which, as the
		// ServiceAccount admission plugin would (logsendpoint checks it).
		if pod.Spec.ServiceAccountName == "" {
			pod.Spec.ServiceAccountName = "default"
		}
	}
	admissible(pod, pol, opts)
	return pod
}

func stepEnv(run *v1.DeferRun) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: stagecontract.EnvNamespace, Value: run.Namespace},
		{Name: stagecontract.EnvJob, Value: run.Spec.JobName},
		{Name: stagecontract.EnvPod, Value: run.Spec.PodName},
		{Name: stagecontract.EnvNode, Value: run.Status.NodeName},
		{Name: stagecontract.EnvUID, Value: string(run.Spec.PodUID)},
		{Name: stagecontract.EnvTrigger, Value: string(run.Status.Trigger)},
		{Name: stagecontract.EnvExitCode, Value: strconv.Itoa(int(ExitCode(run.Status.ExitCodes)))},
	}
	if run.Spec.CompletionIndex != nil {
		env = append(env, corev1.EnvVar{Name: stagecontract.EnvIndex, Value: strconv.Itoa(int(*run.Spec.CompletionIndex))})
	}
	return env
}

// ExitCode is the pod's exit code for KDEFER_EXIT_CODE: the first non-zero
// main container exit code, else 0.
func ExitCode(exits []v1.ContainerExit) int32 {
	for _, e := range exits {
		if e.ExitCode != 0 {
			return e.ExitCode
		}
	}
	return 0
}

func workVolumeNames(run *v1.DeferRun) map[string]bool {
	m := map[string]bool{}
	for _, v := range run.Spec.Volumes {
		m[v.Name] = true
	}
	return m
}

// workMounts mounts the run's work volumes: the first at mountPath, the
// others beside it, suffixed with their names.
func workMounts(run *v1.DeferRun, mountPath string, readOnly bool) []corev1.VolumeMount {
	var out []corev1.VolumeMount
	for i, v := range run.Spec.Volumes {
		p := mountPath
		if i > 0 {
			p = path.Join(mountPath, "..", path.Base(mountPath)+"-"+v.Name)
		}
		out = append(out, corev1.VolumeMount{Name: v.Name, MountPath: p, ReadOnly: readOnly})
	}
	return out
}

func mountsVolume(c *corev1.Container, names map[string]bool) bool {
	for _, m := range c.VolumeMounts {
		if names[m.Name] {
			return true
		}
	}
	return false
}

// stageSecurityContext runs the built-in stage-out step as the pod's main
// containers' user and group when the run recorded them (see StageUserOf),
// so it can read files only their owner may read; nil keeps the defer
// pod's user, 65532. Defer containers are the policy's and keep theirs.
func stageSecurityContext(run *v1.DeferRun) *corev1.SecurityContext {
	su := run.Spec.StageUser
	if su == nil || su.RunAsUser == nil || *su.RunAsUser <= 0 {
		return nil
	}
	sc := &corev1.SecurityContext{RunAsUser: ptr.To(*su.RunAsUser)}
	if su.RunAsGroup != nil && *su.RunAsGroup > 0 {
		sc.RunAsGroup = ptr.To(*su.RunAsGroup)
	}
	return sc
}

func supplementalGroups(run *v1.DeferRun) []int64 {
	if su := run.Spec.StageUser; su != nil && len(su.SupplementalGroups) > 0 {
		return slices.Clone(su.SupplementalGroups)
	}
	return nil
}

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }

func pullPolicy(p corev1.PullPolicy) corev1.PullPolicy {
	if p == "" {
		return corev1.PullIfNotPresent
	}
	return p
}

// StageUID is the UID the run's built-in stage-out step runs as.
func StageUID(run *v1.DeferRun) int64 {
	if sc := stageSecurityContext(run); sc != nil {
		return *sc.RunAsUser
	}
	return deferPodUser
}
