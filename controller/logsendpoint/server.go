// Package logsendpoint is kdefer's logs endpoint (stagecontract.LogsPath):
// it serves an ended pod's container logs to its run's defer pod, and a
// defer pod's own defer containers' logs to its stage-logs sidecar. The
// stage steps have no API access, and giving tenants' service accounts
// pods/log would give it to every pod of theirs. The bearer token is a
// projected service-account token for stagecontract.LogsAudience, so it is
// no use against the apiserver; one TokenReview authenticates it (cached
// for tokenCacheTTL), AuthorizeLogs decides, and a Source streams the log.
//
// Two processes serve it, with different sources: kdefer's node agent
// (kdefer-controller node-agent), from the log files it keeps on its node
// (nodelogs.Spool: the apiserver is not in the data path, and the
// kubelet's removal of a deleted or evicted pod's containers loses
// nothing), and kdefer-controller, where no agent runs, from GET pods/log
// (APISource).
package logsendpoint

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// Source streams one container attempt's log of pod (ref.Previous: the
// attempt before the last restart). An error the endpoint should pass on
// with a status of its own is an *Error (NotFound).
type Source interface {
	Open(ctx context.Context, pod *corev1.Pod, ref stagecontract.LogRef) (io.ReadCloser, error)
}

// Server serves the endpoint.
type Server struct {
	// Client creates TokenReviews.
	Client client.Client
	// Reader reads pods and runs (an uncached reader: a run just triggered
	// and its defer pod just created are read as the apiserver has them).
	Reader client.Reader
	// Source streams the logs.
	Source Source
	Log    logr.Logger
	// Clock (tests); default real.
	Clock clock.PassiveClock

	mu      sync.Mutex
	tokens  map[[32]byte]cachedClaims
	sources map[string]*rate.Limiter
}

// Requests per source address: a stage step asks for an index and a few
// logs, a stage-logs sidecar the same; a pod that asks far more is not one
// of them, and each request costs the apiserver reads.
const (
	sourceRate  = rate.Limit(20)
	sourceBurst = 100
	// sourcesMax bounds the limiters kept; a full map is emptied.
	sourcesMax = 4096
)

// Error is an answer other than 200, with the reason the stage step
// records in the manifest's logWarnings.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// NotFound is the answer for a log there is not, saying why.
func NotFound(format string, args ...any) error {
	return &Error{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

// tokenCacheTTL bounds how long an authenticated token is trusted without
// asking again: a stage step's requests (an index and a few logs) cost one
// TokenReview. A token whose pod is deleted meanwhile still fails, since
// every request reads the pod (AuthorizeLogs checks its UID).
const tokenCacheTTL = time.Minute

// tokenCacheMax bounds the cache; a full cache is emptied.
const tokenCacheMax = 4096

// limit refuses a request from a source that asked too often.
func (s *Server) limit(r *http.Request) error {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	s.mu.Lock()
	if s.sources == nil || len(s.sources) >= sourcesMax {
		s.sources = map[string]*rate.Limiter{}
	}
	l := s.sources[host]
	if l == nil {
		l = rate.NewLimiter(sourceRate, sourceBurst)
		s.sources[host] = l
	}
	s.mu.Unlock()
	if !l.Allow() {
		return &Error{http.StatusTooManyRequests, fmt.Sprintf("too many requests from %s", host)}
	}
	return nil
}

// refusedTokenTTL is how long a refused token stays refused without
// asking again: short, since a token refused for a transient reason (its
// pod not yet known to the apiserver's cache) may be good a moment later.
const refusedTokenTTL = 10 * time.Second

type cachedClaims struct {
	claims  LogsClaims
	refused bool
	expires time.Time
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	err := s.limit(r)
	if err == nil {
		err = s.serve(w, r)
	}
	var he *Error
	switch {
	case err == nil:
	case errors.As(err, &he):
		s.Log.V(1).Info("refuse a logs request", "code", he.Code, "reason", he.Msg)
		http.Error(w, he.Msg, he.Code)
	default:
		s.Log.Error(err, "serve logs")
		http.Error(w, err.Error(), http.StatusBadGateway)
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return &Error{http.StatusUnauthorized, "a bearer token is required"}
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
		return NotFound("pod %s has no log %+v", of.Name, ref)
	}
	rc, err := s.Source.Open(ctx, of, ref)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if _, err := io.Copy(w, rc); err != nil {
		// The status line is sent: the client sees a short body.
		s.Log.Info("stop streaming a log", "pod", of.Name, "container", ref.Container, "error", err.Error())
	}
	return nil
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
// once per tokenCacheTTL; a refused token is remembered too (for
// refusedTokenTTL), so that a pod sending random tokens costs the apiserver
// one TokenReview per token per that time, not per request.
func (s *Server) authenticate(ctx context.Context, token string) (LogsClaims, error) {
	key := sha256.Sum256([]byte(token))
	now := s.now()
	s.mu.Lock()
	c, ok := s.tokens[key]
	s.mu.Unlock()
	if ok && now.Before(c.expires) {
		if c.refused {
			return LogsClaims{}, &Error{http.StatusUnauthorized, "token refused"}
		}
		return c.claims, nil
	}
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{stagecontract.LogsAudience}}}
	if err := s.Client.Create(ctx, tr); err != nil {
		return LogsClaims{}, fmt.Errorf("review the logs token: %w", err)
	}
	claims, err := ClaimsOf(tr.Status)
	entry := cachedClaims{claims: claims, expires: now.Add(tokenCacheTTL)}
	if err != nil {
		entry = cachedClaims{refused: true, expires: now.Add(refusedTokenTTL)}
	}
	s.mu.Lock()
	if s.tokens == nil || len(s.tokens) >= tokenCacheMax {
		s.tokens = map[[32]byte]cachedClaims{}
	}
	s.tokens[key] = entry
	s.mu.Unlock()
	if err != nil {
		return LogsClaims{}, &Error{http.StatusUnauthorized, "token refused"}
	}
	return claims, nil
}

// authorize returns the ended pod whose logs the bearer of claims may
// read, and the bearer's defer pod.
func (s *Server) authorize(ctx context.Context, c LogsClaims) (*corev1.Pod, *corev1.Pod, error) {
	forbidden := func(format string, args ...any) error {
		return &Error{http.StatusForbidden, fmt.Sprintf(format, args...)}
	}
	deferPod := &corev1.Pod{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.PodName}, deferPod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, forbidden("pod %s/%s is gone", c.Namespace, c.PodName)
		}
		return nil, nil, fmt.Errorf("get pod %s/%s: %w", c.Namespace, c.PodName, err)
	}
	runName := v1.DeferPodRun(deferPod)
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
		return nil, nil, &Error{http.StatusGone, fmt.Sprintf("pod %s is gone, and its logs with it", run.Spec.PodName)}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get pod %s/%s: %w", run.Namespace, run.Spec.PodName, err)
	}
	if err := AuthorizeLogs(c, deferPod, run, ended); err != nil {
		if errors.Is(err, ErrOtherNode) {
			// A relocated run (its node lost): refused all the same, but
			// with the reason the manifest's logWarnings should give.
			return nil, nil, &Error{http.StatusGone, fmt.Sprintf("%v: pod %s ran on node %s, and its logs stayed there", err, ended.Name, ended.Spec.NodeName)}
		}
		return nil, nil, forbidden("%v", err)
	}
	return ended, deferPod, nil
}

func (s *Server) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}
