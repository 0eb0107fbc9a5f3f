package controller

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/podstate"
	"github.com/kdefer/kdefer/stagecontract"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get

// LogServer serves an ended pod's container logs to its run's defer pod
// (stagecontract.LogsPath on the webhook server): the stage-out step has no
// API access, and giving tenants' service accounts pods/log would give it
// to every pod of theirs. The bearer token is a projected service-account
// token for stagecontract.LogsAudience, so it is no use against the
// apiserver; one TokenReview authenticates it (cached for tokenCacheTTL),
// AuthorizeLogs decides, and the log is streamed from GET pods/log.
type LogServer struct {
	// Client creates TokenReviews.
	Client client.Client
	// Reader reads pods and runs (the API reader: a run just triggered and
	// its defer pod just created are read as the apiserver has them).
	Reader client.Reader
	// Logs streams a container's log (a clientset's GetLogs in cmd/).
	Logs func(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error)
	Log  logr.Logger
	// Clock (tests); default real.
	Clock clock.PassiveClock

	mu     sync.Mutex
	tokens map[[32]byte]cachedClaims
}

// tokenCacheTTL bounds how long an authenticated token is trusted without
// asking again: a stage step's requests (an index and a few logs) cost one
// TokenReview. A token whose pod is deleted meanwhile still fails, since
// every request reads the pod (AuthorizeLogs checks its UID).
const tokenCacheTTL = time.Minute

// tokenCacheMax bounds the cache; a full cache is emptied.
const tokenCacheMax = 4096

type cachedClaims struct {
	claims  LogsClaims
	expires time.Time
}

type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func (s *LogServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	err := s.serve(w, r)
	var he *httpError
	switch {
	case err == nil:
	case errors.As(err, &he):
		s.Log.V(1).Info("refuse a logs request", "code", he.code, "reason", he.msg)
		http.Error(w, he.msg, he.code)
	default:
		s.Log.Error(err, "serve logs")
		http.Error(w, err.Error(), http.StatusBadGateway)
	}
}

func (s *LogServer) serve(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return &httpError{http.StatusUnauthorized, "a bearer token is required"}
	}
	claims, err := s.authenticate(ctx, token)
	if err != nil {
		return err
	}
	ended, deferPod, err := s.authorize(ctx, claims)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	// The ended pod's logs, or (for the stage-logs sidecar) the defer
	// pod's own defer containers'.
	of, idx := ended, LogsIndexOf(ended)
	if q.Get(stagecontract.LogsStepsParam) == "true" {
		of, idx = deferPod, StepLogsIndexOf(deferPod)
	}
	if q.Get("container") == "" {
		w.Header().Set("Content-Type", "application/json")
		return json.NewEncoder(w).Encode(idx)
	}
	ref := stagecontract.LogRef{Container: q.Get("container"), Previous: q.Get("previous") == "true"}
	if !containsRef(idx.Logs, ref) {
		return &httpError{http.StatusNotFound, fmt.Sprintf("pod %s has no log %+v", of.Name, ref)}
	}
	rc, err := s.Logs(ctx, of.Namespace, of.Name, &corev1.PodLogOptions{Container: ref.Container, Previous: ref.Previous})
	if err != nil {
		return LogFetchError(of, ref, err)
	}
	defer rc.Close()
	body := bufio.NewReaderSize(rc, kubeletLostLogPeek)
	if head, err := body.Peek(kubeletLostLogPeek); errors.Is(err, io.EOF) && KubeletLostLog(head) {
		msg := fmt.Sprintf("the kubelet no longer has log %+v of pod %s: %s", ref, of.Name, strings.TrimSpace(string(head)))
		if kubeletEvicted(of) { // the usual reason, named as for a 400
			return LogFetchError(of, ref, errors.New(msg))
		}
		return &httpError{http.StatusNotFound, msg}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if _, err := io.Copy(w, body); err != nil {
		// The status line is sent: the client sees a short body.
		s.Log.Info("stop streaming a log", "pod", of.Name, "container", ref.Container, "error", err.Error())
	}
	return nil
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
		return &httpError{http.StatusGone, fmt.Sprintf("pod %s was evicted by the kubelet, which removes an evicted pod's containers and their logs as they stop: %v", ended.Name, err)}
	}
	if apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) {
		return &httpError{http.StatusNotFound, err.Error()}
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

func containsRef(refs []stagecontract.LogRef, ref stagecontract.LogRef) bool {
	for _, r := range refs {
		if r == ref {
			return true
		}
	}
	return false
}

// authenticate returns the claims of token, asking the apiserver at most
// once per tokenCacheTTL.
func (s *LogServer) authenticate(ctx context.Context, token string) (LogsClaims, error) {
	key := sha256.Sum256([]byte(token))
	now := s.now()
	s.mu.Lock()
	c, ok := s.tokens[key]
	s.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.claims, nil
	}
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{stagecontract.LogsAudience}}}
	if err := s.Client.Create(ctx, tr); err != nil {
		return LogsClaims{}, fmt.Errorf("review the logs token: %w", err)
	}
	claims, err := ClaimsOf(tr.Status)
	if err != nil {
		return LogsClaims{}, &httpError{http.StatusUnauthorized, "token refused"}
	}
	s.mu.Lock()
	if s.tokens == nil || len(s.tokens) >= tokenCacheMax {
		s.tokens = map[[32]byte]cachedClaims{}
	}
	s.tokens[key] = cachedClaims{claims: claims, expires: now.Add(tokenCacheTTL)}
	s.mu.Unlock()
	return claims, nil
}

// authorize returns the ended pod whose logs the bearer of claims may
// read, and the bearer's defer pod.
func (s *LogServer) authorize(ctx context.Context, c LogsClaims) (*corev1.Pod, *corev1.Pod, error) {
	forbidden := func(format string, args ...any) error {
		return &httpError{http.StatusForbidden, fmt.Sprintf(format, args...)}
	}
	deferPod := &corev1.Pod{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.PodName}, deferPod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, forbidden("pod %s/%s is gone", c.Namespace, c.PodName)
		}
		return nil, nil, fmt.Errorf("get pod %s/%s: %w", c.Namespace, c.PodName, err)
	}
	runName := DeferPodRun(deferPod)
	if runName == "" {
		return nil, nil, forbidden("pod %s is not a defer pod", c.PodName)
	}
	run := &v1.DeferRun{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: runName}, run); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, forbidden("run %s/%s is gone", c.Namespace, runName)
		}
		return nil, nil, fmt.Errorf("get run %s/%s: %w", c.Namespace, runName, err)
	}
	ended := &corev1.Pod{}
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Spec.PodName}, ended)
	if apierrors.IsNotFound(err) || (err == nil && ended.UID != run.Spec.PodUID) {
		return nil, nil, &httpError{http.StatusGone, fmt.Sprintf("pod %s is gone, and its logs with it", run.Spec.PodName)}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get pod %s/%s: %w", run.Namespace, run.Spec.PodName, err)
	}
	if err := AuthorizeLogs(c, deferPod, run, ended); err != nil {
		return nil, nil, forbidden("%v", err)
	}
	return ended, deferPod, nil
}

func (s *LogServer) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}
