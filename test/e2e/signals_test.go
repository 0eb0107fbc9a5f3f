//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/kdefer/kdefer/test/clusterenv"
)

// signals is an HTTP server on the node address: pods GET /ready/POD when
// their outputs are written and GET /go/POD to wait for the test's release;
// defer containers POST results to /result, and GET /count/KEY for how
// often KEY was asked, this time included (state a restarted container
// keeps).
type signals struct {
	url     string
	ready   chan string
	results chan string
	mu      sync.Mutex
	gos     map[string]chan struct{}
	counts  map[string]int
	done    chan struct{}
}

func newSignals(t *testing.T) *signals {
	s := &signals{ready: make(chan string, 64), results: make(chan string, 64), gos: map[string]chan struct{}{}, counts: map[string]int{}, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/ready/{pod}", func(w http.ResponseWriter, r *http.Request) {
		s.ready <- r.PathValue("pod")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/go/{pod}", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.goChan(r.PathValue("pod")):
			fmt.Fprintln(w, "go")
		case <-s.done:
			http.Error(w, "test over", http.StatusServiceUnavailable)
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/count/{key}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.counts[r.PathValue("key")]++
		n := s.counts[r.PathValue("key")]
		s.mu.Unlock()
		fmt.Fprintln(w, n)
	})
	mux.HandleFunc("/result", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		s.results <- string(b)
		fmt.Fprintln(w, "ok")
	})
	s.url = clusterenv.ServeOnNode(t, mux)
	t.Cleanup(func() { close(s.done) })
	return s
}

func (s *signals) goChan(pod string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.gos[pod]
	if !ok {
		c = make(chan struct{})
		s.gos[pod] = c
	}
	return c
}

// release lets pod's "wait" end.
func (s *signals) release(pod string) {
	c := s.goChan(pod)
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

// drainReady drops the ready signals received so far.
func (s *signals) drainReady() {
	for {
		select {
		case <-s.ready:
		default:
			return
		}
	}
}

// waitReady returns the next pod that signalled ready.
func (sc *scenario) waitReady(timeout time.Duration) string {
	sc.t.Helper()
	select {
	case p := <-sc.sig.ready:
		sc.logf("pod %s wrote its outputs", p)
		return p
	case <-time.After(timeout):
		sc.t.Fatalf("no pod signalled ready within %s (outputs written)", timeout)
	}
	return ""
}

func (sc *scenario) waitResult(timeout time.Duration) string {
	sc.t.Helper()
	select {
	case r := <-sc.sig.results:
		return r
	case <-time.After(timeout):
		sc.t.Fatalf("no result posted within %s", timeout)
	}
	return ""
}
