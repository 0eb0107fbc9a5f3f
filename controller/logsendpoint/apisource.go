package logsendpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kdefer/kdefer/controller/podstate"
	"github.com/kdefer/kdefer/stagecontract"
)

// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get

// APISource streams logs from GET pods/log: kdefer-controller's source,
// for clusters where the node agent does not run. It races the kubelet,
// which removes a deleted or evicted pod's containers, and their logs, as
// soon as they stop; the node agent's spool does not.
type APISource struct {
	// Logs streams a container's log (a clientset's GetLogs in cmd/).
	Logs func(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error)
}

// Open implements Source.
func (a APISource) Open(ctx context.Context, pod *corev1.Pod, ref stagecontract.LogRef) (io.ReadCloser, error) {
	rc, err := a.Logs(ctx, pod.Namespace, pod.Name, &corev1.PodLogOptions{Container: ref.Container, Previous: ref.Previous})
	if err != nil {
		return nil, LogFetchError(pod, ref, err)
	}
	body := bufio.NewReaderSize(rc, kubeletLostLogPeek)
	if head, err := body.Peek(kubeletLostLogPeek); errors.Is(err, io.EOF) && KubeletLostLog(head) {
		rc.Close()
		msg := fmt.Sprintf("the kubelet no longer has log %+v of pod %s: %s", ref, pod.Name, strings.TrimSpace(string(head)))
		if kubeletEvicted(pod) { // the usual reason, named as for a 400
			return nil, LogFetchError(pod, ref, errors.New(msg))
		}
		return nil, &Error{http.StatusNotFound, msg}
	}
	return readCloser{body, rc}, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// LogFetchError is the answer to a log the apiserver would not give
// (GET pods/log failed with err), with a reason the stage step records
// in the manifest's logWarnings. The kubelet answers 400 for a container
// whose log it no longer has. A kubelet-evicted pod is the usual case: the
// kubelet removes an evicted pod's containers, and their logs, as soon as
// they stop (pod_workers.go ShouldPodContentBeRemoved, the container
// deletor), so its logs are gone before any defer pod can ask, although the
// pod object still lists the containers.
func LogFetchError(ended *corev1.Pod, ref stagecontract.LogRef, err error) error {
	if kubeletEvicted(ended) {
		return &Error{http.StatusGone, fmt.Sprintf("pod %s was evicted by the kubelet, which removes an evicted pod's containers and their logs as they stop: %v", ended.Name, err)}
	}
	if apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) {
		return &Error{http.StatusNotFound, err.Error()}
	}
	return fmt.Errorf("get log of %s/%s %+v: %w", ended.Namespace, ended.Name, ref, err)
}

// kubeletLostLogPeek bounds what is read ahead to recognize the kubelet's
// "unable to retrieve" body (one line with a container ID).
const kubeletLostLogPeek = 512

// KubeletLostLog reports whether a whole log body is the kubelet's message
// for a container log it no longer has. Kubernetes v1.37's kubelet answers
// GET pods/log of a pruned container attempt with 200 and that message as
// the body (seen in e2e TestStepRetried: an init container's attempt the
// kubelet removed when it started the next), where v1.34's answered 400;
// archived as is, it would pass for the container's own output.
func KubeletLostLog(body []byte) bool {
	line, ok := strings.CutPrefix(strings.TrimSuffix(string(body), "\n"), "unable to retrieve container logs for ")
	if !ok || strings.ContainsAny(line, " \n") {
		return false
	}
	_, id, ok := strings.Cut(line, "://")
	return ok && id != ""
}

// kubeletEvicted says whether the kubelet's eviction manager ended pod
// (its status reason; a graceful node shutdown, the other
// TerminationByKubelet, keeps its containers).
func kubeletEvicted(pod *corev1.Pod) bool {
	return pod.Status.Reason == podstate.PodReasonEvicted
}
