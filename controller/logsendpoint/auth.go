package logsendpoint

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
)

// The user extra keys the apiserver puts in a TokenReview of a token bound
// to a pod (a projected service-account token).
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

const saUserPrefix = "system:serviceaccount:"

// LogsClaims are what an authenticated logs token says about its bearer:
// the pod it is bound to and that pod's service account.
type LogsClaims struct {
	Namespace, ServiceAccount, PodName, PodUID string
}

// ClaimsOf reads a TokenReview's answer: the token must be authenticated
// for stagecontract.LogsAudience (so it is no apiserver token) and bound to
// a pod.
func ClaimsOf(st authnv1.TokenReviewStatus) (LogsClaims, error) {
	if !st.Authenticated {
		return LogsClaims{}, fmt.Errorf("token not authenticated: %s", st.Error)
	}
	if !slices.Contains(st.Audiences, stagecontract.LogsAudience) {
		return LogsClaims{}, fmt.Errorf("token audiences %v lack %s", st.Audiences, stagecontract.LogsAudience)
	}
	rest, ok := strings.CutPrefix(st.User.Username, saUserPrefix)
	ns, sa, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || ns == "" || sa == "" {
		return LogsClaims{}, fmt.Errorf("user %q is not a service account", st.User.Username)
	}
	c := LogsClaims{Namespace: ns, ServiceAccount: sa}
	if v := st.User.Extra[extraPodName]; len(v) == 1 {
		c.PodName = v[0]
	}
	if v := st.User.Extra[extraPodUID]; len(v) == 1 {
		c.PodUID = v[0]
	}
	if c.PodName == "" || c.PodUID == "" {
		return LogsClaims{}, fmt.Errorf("token of %s is not bound to a pod", st.User.Username)
	}
	return c, nil
}

// ErrOtherNode is AuthorizeLogs' refusal of a defer pod on another node
// than the run's: a relocated run, whose pod's node was lost, and its logs
// with it.
var ErrOtherNode = errors.New("the logs are on another node")

// AuthorizeLogs says whether the bearer of claims may read the logs of
// run's ended pod: only run's own defer pod may, while it exists (deferPod
// is the pod the token is bound to, as the apiserver has it now, and run
// the run it names).
//
// Every fact checked is one a tenant cannot forge for another run: the
// token's pod is the apiserver's (namespace, name and UID), the run is
// kdefer's, the pod has the name kdefer gives the run's defer pod, is owned
// by the run (or carries its UID), runs on the run's node and was created
// after the run was triggered, and the run's policy archives logs. The
// run's status (node, trigger time) is written up to 30 s after its defer
// pod is created (the bookkeeping delay), so the stage step usually asks
// before it exists: until then the node is the ended pod's, where it ran. What is
// left is a principal who may create pods in the run's namespace and wins
// the race against kdefer's create of the defer pod's name: that run then
// fails visibly, its defer pod refused as already existing (docs/design.md,
// "Logs outlive every pod").
func AuthorizeLogs(c LogsClaims, deferPod *corev1.Pod, run *v1.DeferRun, ended *corev1.Pod) error {
	node := run.Status.NodeName
	if node == "" {
		node = ended.Spec.NodeName
	}
	switch {
	case deferPod.Namespace != c.Namespace || deferPod.Name != c.PodName || string(deferPod.UID) != c.PodUID:
		return fmt.Errorf("the token's pod %s/%s (uid %s) is gone", c.Namespace, c.PodName, c.PodUID)
	case run.Namespace != c.Namespace:
		return fmt.Errorf("run %s/%s is in another namespace than the token's pod", run.Namespace, run.Name)
	case deferPod.Name != v1.DeferPodName(run) || !v1.IsDeferPodOf(deferPod, run):
		return fmt.Errorf("pod %s is not the defer pod of run %s", deferPod.Name, run.Name)
	case serviceAccountOf(deferPod) != c.ServiceAccount:
		return fmt.Errorf("the token's service account %s is not pod %s's", c.ServiceAccount, deferPod.Name)
	case node == "" || deferPod.Spec.NodeName != node:
		return fmt.Errorf("pod %s is not on run %s's node %q: %w", deferPod.Name, run.Name, node, ErrOtherNode)
	case run.Status.TriggeredAt != nil && deferPod.CreationTimestamp.Time.Before(run.Status.TriggeredAt.Time):
		return fmt.Errorf("pod %s was created before run %s was triggered", deferPod.Name, run.Name)
	case !run.Spec.Policy.StageOut.LogsEnabled():
		return fmt.Errorf("run %s's policy does not archive logs (stageOut.logs.enabled)", run.Name)
	}
	return nil
}

func serviceAccountOf(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName == "" {
		return "default"
	}
	return pod.Spec.ServiceAccountName
}

// LogsIndexOf lists the logs of an ended pod: every init and main
// container's, and the previous attempt's of each that restarted.
func LogsIndexOf(pod *corev1.Pod) stagecontract.LogsIndex {
	restarts := map[string]int32{}
	for _, st := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		restarts[st.Name] = st.RestartCount
	}
	idx := stagecontract.LogsIndex{Pod: pod.Name, Logs: []stagecontract.LogRef{}}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		idx.Logs = append(idx.Logs, stagecontract.LogRef{Container: c.Name})
		if restarts[c.Name] > 0 && canRestart(pod, c) {
			idx.Logs = append(idx.Logs, stagecontract.LogRef{Container: c.Name, Previous: true})
		}
	}
	return idx
}

// canRestart says whether c of pod can have had an attempt before its
// last. Under restartPolicy Never only a native sidecar restarts: a
// restart count there is the kubelet's for a container it lost (it counts
// one when an evicted pod's container is gone before its status was read,
// ContainerStatusUnknown), not an attempt with a log.
func canRestart(pod *corev1.Pod, c corev1.Container) bool {
	return pod.Spec.RestartPolicy != corev1.RestartPolicyNever ||
		(c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways)
}

// StepLogsIndexOf lists the logs of a defer pod's defer containers (their
// previous attempts too), for its stage-logs sidecar: not its built-in
// containers', since the stage-out step archives its own log with the
// manifest and the sidecar is the one asking.
func StepLogsIndexOf(deferPod *corev1.Pod) stagecontract.LogsIndex {
	idx := LogsIndexOf(deferPod)
	idx.Logs = slices.DeleteFunc(idx.Logs, func(r stagecontract.LogRef) bool {
		return r.Container == v1.StageOutStepName || r.Container == v1.StageLogsName
	})
	return idx
}
