package main

// The floor: what the burst's reaction costs with no controller logic at all,
// measured on the same apiserver in the same run, so that kdefer's burst p99
// can be given as a ratio to it rather than as a number that says more about
// the machine's load than about kdefer.
//
// The floor replays the burst with a bare client in the manager's place:
// the same number of pods (same spec as the managed pods, on the same nodes)
// end by the same status writes at the same parallelism, and a reactor, an
// informer on those pods and nothing else, creates for each ended pod a copy
// of the defer pod kdefer created in the burst (same spec, labels,
// annotations and owner; only the name and the managed label differ, so the
// manager never sees either side of the floor). It creates each as soon as
// its pod's end arrives, through a FIFO to as many goroutines as the manager
// has workers (no reconcile, no other reads or writes), through a client with
// the manager's QPS and burst and a connection of its own, as the manager
// has. Its per-pod latency
// is kdefer's: from the status write that ends the pod to the bench's watch
// seeing the created pod.

import (
	"context"
	"fmt"
	"net"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/cmd/kdefer-controller/app"
	kt "github.com/kdefer/kdefer/controller/testing"
	ct "github.com/kdefer/kdefer/controller/testing/clienttest"
)

const (
	// labelFloor marks the floor's pods: "trigger" on the pods that end,
	// "pod" on the pods the reactor creates. Neither has kdefer's managed
	// label, which is all the manager's pod cache selects.
	labelFloor   = "bench.kdefer.io/floor"
	floorTrigger = "trigger"
	floorPod     = "pod"
)

func floorName(i int) string { return fmt.Sprintf("f-%05d", i) }

// ownConnection gives a client config a transport of its own (client-go
// shares one per TLS config otherwise), as a separate process would have:
// the manager and the floor's reactor each get one, so neither queues
// behind the other's or the bench's streams, and the connection's goroutines
// carry the profile label of the part that dialled it.
func ownConnection(cfg *rest.Config) {
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
}

// floorResult is what the floor measured.
type floorResult struct {
	latencies []time.Duration
	seen      []time.Duration // from each pod's end to the reactor seeing it
	created   []time.Duration // from each pod's end to its create returning
	wall      time.Duration
	cpu       map[string]float64 // CPU seconds by profile label part
}

// floor is the floor's trigger pods and its reactor, ready before kdefer's
// burst so that the floor can follow the burst within seconds (the machine's
// load drifts).
type floor struct {
	names  []string // the trigger pods
	idx    []int    // the burst's pods, whose defer pods the reactor copies
	marks  *watcher // the reactor's side: when it saw each end, when its create returned
	failed firstError
	stop   context.CancelFunc

	mu   sync.Mutex
	tmpl map[string]*corev1.Pod // trigger pod name -> the pod to create
}

// prepareFloor creates the floor's trigger pods, running, one per burst pod
// (idx), with the managed pods' spec but not kdefer's label, and starts the
// reactor; cfg is the apiserver's admin config, c the bench's client.
func prepareFloor(ctx context.Context, cfg *rest.Config, c client.Client, idx []int, jobUIDs []types.UID) (*floor, error) {
	f := &floor{idx: idx, names: names(floorName, idx), marks: newWatcher()}
	logf("floor: creating %d pods", len(idx))
	if err := parallel(len(idx), 32, func(k int) error {
		i := idx[k]
		j := i / *podsPerJob
		p := kt.MakePod(floorName(i), ns).OnNode(nodeName(i)).OwnedByJob(fmt.Sprintf("job-%04d", j), jobUIDs[j]).Obj()
		p.UID, p.Status = "", corev1.PodStatus{}
		delete(p.Labels, v1.LabelManaged)
		p.Labels[labelFloor] = floorTrigger
		if err := c.Create(ctx, p); err != nil {
			return err
		}
		return ct.SetRunning(ctx, c, p)
	}); err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	f.stop = stop
	var err error
	pprof.Do(rctx, pprof.Labels("part", "floor"), func(rctx context.Context) {
		err = f.startReactor(rctx, cfg)
	})
	if err != nil {
		stop()
		return nil, err
	}
	return f, nil
}

// run copies kdefer's defer pods of the burst as what the reactor creates,
// ends the trigger pods as the burst ended its pods and returns the
// latencies, measured as the burst's.
func (f *floor) run(ctx context.Context, c client.Client, seen *watcher) (floorResult, error) {
	defer f.stop()
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{v1.LabelManaged: v1.ManagedDeferPod}); err != nil {
		return floorResult{}, fmt.Errorf("reading kdefer's defer pods: %w", err)
	}
	byName := map[string]*corev1.Pod{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	tmpl := make(map[string]*corev1.Pod, len(f.idx))
	for _, i := range f.idx {
		d := byName[podName(i)+"-defer"]
		if d == nil {
			return floorResult{}, fmt.Errorf("no defer pod of %s to copy", podName(i))
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: floorName(i) + "-defer", Namespace: ns,
				Labels: d.Labels, Annotations: d.Annotations, OwnerReferences: d.OwnerReferences, Finalizers: d.Finalizers,
			},
			Spec: d.Spec,
		}
		delete(p.Labels, v1.LabelManaged)
		p.Labels[labelFloor] = floorPod
		tmpl[floorName(i)] = p
	}
	f.mu.Lock()
	f.tmpl = tmpl
	f.mu.Unlock()

	logf("floor: terminating %d pods at once", len(f.names))
	var res floorResult
	var werr error
	prof, err := profileParts("", func() error {
		wall0 := time.Now()
		if err := terminate(ctx, c, seen, f.names, 64); err != nil {
			return err
		}
		werr = waitFor(ctx, 5*time.Minute, func() bool { return seen.count(f.names) == len(f.names) || f.failed.get() != nil })
		res.wall = time.Since(wall0)
		return nil
	})
	if err != nil {
		return floorResult{}, err
	}
	if err := f.failed.get(); err != nil {
		return floorResult{}, fmt.Errorf("floor reactor: %w", err)
	}
	if werr != nil {
		return floorResult{}, fmt.Errorf("floor: %d of %d pods: %w", seen.count(f.names), len(f.names), werr)
	}
	res.latencies, res.cpu = seen.latencies(f.names), prof
	res.seen, res.created = f.marks.since(seen, f.names, "-seen"), f.marks.since(seen, f.names, "-created")
	return res, nil
}

// startReactor starts the floor's bare client: an informer on the trigger
// pods and a create per ended pod, with the manager's client-side limits.
func (f *floor) startReactor(ctx context.Context, cfg *rest.Config) error {
	fcfg := rest.CopyConfig(cfg)
	app.ClientLimits(fcfg, *qps, *burstLimit)
	ownConnection(fcfg)
	hc, err := rest.HTTPClientFor(fcfg)
	if err != nil {
		return err
	}
	fcc, err := client.NewWithWatch(fcfg, client.Options{Scheme: scheme.New(), HTTPClient: hc})
	if err != nil {
		return err
	}
	fc := patient(fcc)
	inf, err := cache.New(fcfg, cache.Options{Scheme: scheme.New(), HTTPClient: hc, ByObject: map[client.Object]cache.ByObject{
		// Only what it reads: its cache is in the heap heap_mib measures.
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{labelFloor: floorTrigger}), Transform: func(o any) (any, error) {
			if p, ok := o.(*corev1.Pod); ok {
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion},
					Status: corev1.PodStatus{Phase: p.Status.Phase}}, nil
			}
			return o, nil
		}},
	}})
	if err != nil {
		return err
	}
	pods, err := inf.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	// As many creates at a time as the manager has workers: a thousand at
	// once only make a starved apiserver time some of them out.
	n := *workers
	if n <= 0 {
		n = 32 // controller.Options.Workers' default
	}
	todo := make(chan *corev1.Pod, len(f.names))
	for range n {
		go func() {
			for pod := range todo {
				if err := fc.Create(ctx, pod); err != nil {
					f.failed.set(fmt.Errorf("creating %s: %w", pod.Name, err))
				}
				f.marks.ended(strings.TrimSuffix(pod.Name, "-defer") + "-created")
			}
		}()
	}
	var created sync.Map
	_, err = pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Status.Phase != corev1.PodSucceeded {
			return
		}
		if _, dup := created.LoadOrStore(p.Name, true); dup {
			return
		}
		f.marks.ended(p.Name + "-seen")
		f.mu.Lock()
		pod := f.tmpl[p.Name].DeepCopy()
		f.mu.Unlock()
		todo <- pod
	}})
	if err != nil {
		return err
	}
	go func() { _ = inf.Start(ctx) }()
	if !inf.WaitForCacheSync(ctx) {
		return fmt.Errorf("floor reactor's cache did not sync")
	}
	return nil
}

// firstError keeps the first error reported from any goroutine.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
