package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kdefer/kdefer/api/scheme"
)

type watcher struct {
	mu    sync.Mutex
	end   map[string]time.Time
	added map[string]time.Time
}

func newWatcher() *watcher {
	return &watcher{end: map[string]time.Time{}, added: map[string]time.Time{}}
}

// watch notes when pods matching sel first appear, through a watch of
// their metadata only: decoding whole pods made the bench's own watch the
// tail of a fast burst on a loaded machine (a thousand pods created in 5 s
// were seen over 30 s), which penalises whichever side creates faster.
func (w *watcher) watch(ctx context.Context, cfg *rest.Config, sel labels.Selector) error {
	pods := &metav1.PartialObjectMetadata{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	c, err := cache.New(cfg, cache.Options{Scheme: scheme.New(), ByObject: map[client.Object]cache.ByObject{pods: {Label: sel}}})
	if err != nil {
		return err
	}
	inf, err := c.GetInformer(ctx, pods)
	if err != nil {
		return err
	}
	if _, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if p, ok := obj.(*metav1.PartialObjectMetadata); ok {
			w.mu.Lock()
			if _, dup := w.added[p.Name]; !dup {
				w.added[p.Name] = time.Now()
			}
			w.mu.Unlock()
		}
	}}); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("bench cache did not sync")
	}
	return nil
}

func (w *watcher) ended(deferPod string) {
	w.mu.Lock()
	w.end[deferPod] = time.Now()
	w.mu.Unlock()
}

// since are the durations from each pod's end (in ends) to this watcher's
// end mark name+suffix, sorted.
func (w *watcher) since(ends *watcher, pods []string, suffix string) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	ends.mu.Lock()
	defer ends.mu.Unlock()
	var out []time.Duration
	for _, pod := range pods {
		t, ok1 := w.end[pod+suffix]
		e, ok2 := ends.end[pod+"-defer"]
		if ok1 && ok2 {
			out = append(out, t.Sub(e))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// count is how many of the pods' defer pods (or floor pods) appeared.
func (w *watcher) count(pods []string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, name := range pods {
		if _, ok := w.added[name+"-defer"]; ok {
			n++
		}
	}
	return n
}

// latencies are the pods' reaction times, sorted: from the status write
// that ended each to its defer pod (or floor pod) appearing.
func (w *watcher) latencies(pods []string) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for _, pod := range pods {
		name := pod + "-defer"
		a, ok1 := w.added[name]
		e, ok2 := w.end[name]
		if ok1 && ok2 {
			d := a.Sub(e)
			if d < 0 {
				d = 0
			}
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := (len(d)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	if i > len(d) {
		i = len(d)
	}
	return d[i-1]
}

// cpuTimes reads the CPU time (user+system) of this process and of its
