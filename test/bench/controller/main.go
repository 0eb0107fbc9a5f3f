// Command controller benchmarks kdefer's controller on a real kube-apiserver
// (envtest binaries; `make bench-controller`): 10,000 managed pods watched,
// 1,000 of them terminating at once, then a steady 20 terminations a second,
// then the floor (floor.go): the same burst answered by a bare client.
// The kubelet is simulated by status writes; the manager runs with
// kdefer-controller's defaults (workers, client-side QPS and burst). It
// prints one line:
//
//	RESULT bench=controller p50_ms=.. p99_ms=.. floor_p99_ms=.. floor_ratio=.. steady_p99_ms=.. heap_mib_per_10k=.. unmanaged_heap_mib=.. writes_per_run=.. mgr_cpu_s_per_1k_arm=.. mgr_cpu_s_per_1k_burst=..
//
// p50/p99: burst reaction time, from the status write that ends a pod to the
// bench's watch seeing its defer pod; floor_p99/floor_ratio: the floor's p99,
// measured the same way, and kdefer's p99 over it; steady_p99: the same at
// the steady rate; heap_mib_per_10k: the manager's heap growth per 10,000
// armed pods; unmanaged_heap_mib: its growth with 10,000 unmanaged pods
// present; writes_per_run: the manager's API writes per pod, from creation
// to release; mgr_cpu_s_per_1k_arm/burst: the manager's CPU seconds
// (cpuparts.go) per 1,000 pods armed, and per 1,000 runs from the pods' end
// to their runs' StagingOut status (the burst and its bookkeeping).
//
// With -nodes N (N > 1) the pods are spread over N Node objects (no
// kubelets) and the line is
//
//	RESULT bench=controller-Nnodes p50_ms=.. p99_ms=.. floor_p99_ms=.. floor_ratio=.. heap_mib=.. mgr_cpu_s_per_1k_arm=.. mgr_cpu_s_per_1k_burst=..
//
// heap_mib: the process's heap growth from before the nodes exist to after
// the burst's bookkeeping: the manager's (nodes, pods, runs and defer pods
// cached), the bench's own watches and the floor's reactor holding only
// metadata or less.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdefer/kdefer/test/repo"

	"github.com/go-logr/zerologr"
	"github.com/rs/zerolog"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/cmd/kdefer-controller/app"
	"github.com/kdefer/kdefer/controller"
	kt "github.com/kdefer/kdefer/controller/testing"
	ct "github.com/kdefer/kdefer/controller/testing/clienttest"
	"github.com/kdefer/kdefer/controller/webhook"
	rt "github.com/kdefer/kdefer/render/testing"
)

var (
	nPods      = flag.Int("pods", 10000, "managed pods")
	nBurst     = flag.Int("burst", 1000, "pods terminating at once")
	nUnmanaged = flag.Int("unmanaged", 10000, "unmanaged pods")
	steadyRate = flag.Int("steady-rate", 20, "terminations per second in the steady phase")
	steadyFor  = flag.Duration("steady-for", 10*time.Second, "length of the steady phase")
	workers    = flag.Int("workers", 0, "manager workers per controller (0: the manager's default)")
	qps        = flag.Float64("kube-api-qps", app.DefaultKubeAPIQPS, "the manager's client-side QPS limit (0: none)")
	burstLimit = flag.Int("kube-api-burst", app.DefaultKubeAPIBurst, "the manager's client-side burst")
	podsPerJob = flag.Int("pods-per-job", 100, "managed pods per Job")
	verbose    = flag.Bool("v", false, "manager logs on stderr")
	queues     = flag.Bool("queues", false, "log the controllers' workqueue depths every second")
	memProfile = flag.String("memprofile", "", "write a heap profile here once every pod is armed (and to FILE.burst after the burst)")
	creds      = flag.Bool("credentials", false, "managed pods name a credentials Secret (the run checks it exists before its defer pod)")
	cpuProfile = flag.String("cpuprofile", "", "write a CPU profile of the bench process (manager included) during the burst and its bookkeeping here (go tool pprof -tagfocus=part=manager: the manager alone)")
	apiProfile = flag.String("apiserver-cpuprofile", "", "write a CPU profile of the kube-apiserver during the burst here")
	armWebhook = flag.Bool("arm-webhook", true, "serve the work-PVC arming webhook, as kdefer-controller does (false: the controller arms every pod)")
	nNodes     = flag.Int("nodes", 1, "Node objects the pods are spread over (more than 1: the RESULT line is bench=controller-Nnodes)")
	noFloor    = flag.Bool("no-floor", false, "skip the floor (no floor_ratio)")
)

const (
	ns          = "bench"
	benchSecret = "bench-credentials"
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-controller:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func run() error {
	w := io.Discard
	if *verbose {
		w = os.Stderr
	}
	zl := zerolog.New(w).With().Timestamp().Logger()
	ctrl.SetLogger(zerologr.New(&zl))

	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set: run 'make envtest-assets' (make bench-controller does)")
	}
	te := &ctrlenvtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repo.MustRoot(), "deploy", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                scheme.New(),
	}
	if *armWebhook {
		// Only the arming webhook of deploy/webhook (the bench's Jobs are
		// not rendered), served by the manager below.
		hook, err := armWebhookConfig()
		if err != nil {
			return err
		}
		te.WebhookInstallOptions.MutatingWebhooks = []*admissionregistrationv1.MutatingWebhookConfiguration{hook}
	}
	cfg, err := te.Start()
	if err != nil {
		return fmt.Errorf("starting apiserver: %w", err)
	}
	defer func() { _ = te.Stop() }()
	cfg.QPS, cfg.Burst = 5000, 10000
	cc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return err
	}
	c := patient(cc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	// The manager, with its writes counted.
	steadyN := int(steadyFor.Seconds()) * *steadyRate
	writes := &ct.WriteCounter{Keep: func(w ct.Write) bool {
		// Remember only the steady phase's writes (and Jobs'): they give
		// writes_per_run; the rest is only counted.
		var i int
		if _, err := fmt.Sscanf(w.Name, "m-%05d", &i); err == nil {
			return i >= *nBurst && i < *nBurst+steadyN
		}
		return w.Kind == "Job"
	}}
	// The manager's own client-side limits, as kdefer-controller sets them
	// by default.
	mcfg := *cfg
	app.ClientLimits(&mcfg, *qps, *burstLimit)
	ownConnection(&mcfg)
	hooks := webhook.Options{Disabled: true}
	if wio := te.WebhookInstallOptions; *armWebhook {
		hooks = webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir, CertMode: webhook.CertModeExternal}
	}
	// Built and started under the profile label part=manager, which every
	// goroutine it starts inherits (cpuparts.go).
	var mgr ctrl.Manager
	pprof.Do(ctx, pprof.Labels("part", "manager"), func(ctx context.Context) {
		mgr, err = app.NewManager(ctx, &mcfg, app.ManagerOptions{
			MetricsAddr: "0", ProbeAddr: "0", NewClient: writes.NewClient, Webhook: hooks,
			Options: controller.Options{DeferPod: controller.DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:bench"}, Workers: *workers},
		})
		if err != nil {
			return
		}
		go func() {
			if err := mgr.Start(ctx); err != nil {
				logf("manager: %v", err)
			}
		}()
	})
	if err != nil {
		return err
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("manager caches did not sync")
	}

	// The bench's own watches: defer pods appearing, and the floor's pods.
	seen := newWatcher()
	for _, sel := range []labels.Set{{v1.LabelManaged: v1.ManagedDeferPod}, {labelFloor: floorPod}} {
		if err := seen.watch(ctx, cfg, labels.SelectorFromSet(sel)); err != nil {
			return err
		}
	}

	if *queues {
		go func() {
			for range time.Tick(time.Second) {
				mfs, _ := metrics.Registry.Gather()
				var parts []string
				for _, mf := range mfs {
					if mf.GetName() != "workqueue_depth" && mf.GetName() != "controller_runtime_active_workers" {
						continue
					}
					for _, m := range mf.GetMetric() {
						// One entry per series: the controller, and for
						// the priority queue's depth its priority (p10:
						// pods just ended, p0: bookkeeping and the rest).
						var ctrlName, prio string
						for _, l := range m.GetLabel() {
							switch l.GetName() {
							case "name", "controller":
								ctrlName = l.GetValue()
							case "priority":
								prio = "/p" + l.GetValue()
							}
						}
						parts = append(parts, fmt.Sprintf("%s/%s%s=%.0f", strings.TrimPrefix(mf.GetName(), "controller_runtime_"), ctrlName, prio, m.GetGauge().GetValue()))
					}
				}
				sort.Strings(parts)
				logf("queues %s", strings.Join(parts, " "))
			}
		}()
	}
	h0 := heapMiB()
	logf("creating %d nodes", *nNodes)
	if err := parallel(*nNodes, 16, func(i int) error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i)}}
		if err := c.Create(ctx, node); err != nil {
			return err
		}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		return c.Status().Update(ctx, node)
	}); err != nil {
		return err
	}
	logf("creating %d unmanaged pods", *nUnmanaged)
	if err := parallel(*nUnmanaged, 32, func(i int) error {
		p := kt.MakePod(fmt.Sprintf("u-%05d", i), ns).OnNode(nodeName(i)).NoFinalizer().Obj()
		p.UID, p.Labels, p.Annotations, p.Status = "", nil, nil, corev1.PodStatus{}
		p.Spec.Volumes, p.Spec.Containers[0].VolumeMounts = nil, nil
		return c.Create(ctx, p)
	}); err != nil {
		return err
	}
	time.Sleep(3 * time.Second) // nothing should arrive; give it the chance to
	h1 := heapMiB()
	unmanaged := h1 - h0
	logf("heap %.1f MiB -> %.1f MiB with unmanaged pods", h0, h1)

	if *creds {
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: benchSecret, Namespace: ns}}); err != nil {
			return err
		}
	}
	logf("creating %d managed pods with their Jobs and work PVCs", *nPods)
	jobs := (*nPods + *podsPerJob - 1) / *podsPerJob
	jobUIDs := make([]types.UID, jobs)
	if err := parallel(jobs, 16, func(i int) error {
		j := rt.MakeJob(fmt.Sprintf("job-%04d", i), ns).Obj()
		j.Spec.Template.Labels = map[string]string{"job": j.Name}
		j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"job": j.Name}}
		j.Spec.ManualSelector = ptr.To(true)
		if err := c.Create(ctx, j); err != nil {
			return err
		}
		jobUIDs[i] = j.UID
		return nil
	}); err != nil {
		return err
	}
	start := time.Now()
	armCPU, err := profileParts("", func() error { return createManaged(ctx, c, writes, jobUIDs, start) })
	if err != nil {
		return err
	}
	h2 := heapMiB()
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return err
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			return err
		}
		f.Close()
	}
	perTenK := (h2 - h1) * 10000 / float64(*nPods)
	logf("heap %.1f MiB with %d armed pods; arming CPU seconds: %s", h2, *nPods, partsString(armCPU))

	burst := make([]int, *nBurst)
	for i := range burst {
		burst[i] = i
	}
	var fl *floor
	if !*noFloor {
		if fl, err = prepareFloor(ctx, cfg, c, burst, jobUIDs); err != nil {
			return err
		}
		time.Sleep(3 * time.Second) // let the apiserver settle after the creations
	}

	// Burst: nBurst pods end at once.
	logf("terminating %d pods at once", *nBurst)
	apiProf := make(chan error, 1)
	if *apiProfile != "" {
		go func() { apiProf <- profileAPIServer(ctx, cfg, *apiProfile, 8) }()
		time.Sleep(200 * time.Millisecond)
	}
	burstNames := names(podName, burst)
	burstCPU, err := profileParts(*cpuProfile, func() error {
		cpu0, wall0 := cpuTimes(), time.Now()
		if err := terminate(ctx, c, seen, burstNames, 64); err != nil {
			return err
		}
		if err := waitFor(ctx, 5*time.Minute, func() bool { return seen.count(burstNames) == len(burst) }); err != nil {
			return fmt.Errorf("burst: %d of %d defer pods: %w", seen.count(burstNames), len(burst), err)
		}
		cpu1, wall := cpuTimes(), time.Since(wall0)
		logf("burst: %s wall, CPU seconds %s", wall.Round(time.Millisecond), cpuDelta(cpu0, cpu1))
		// What the floor does not do: run status writes (held off while
		// defer pods are created fast) and Events, competing with the
		// burst's creations for the apiserver.
		logf("burst: %d run status writes before its last defer pod was seen", writes.Total("update", "DeferRun/status"))
		// Let the burst's bookkeeping (trigger and StagingOut status)
		// finish before the steady phase, which measures an idle
		// controller.
		if err := waitFor(ctx, 5*time.Minute, func() bool {
			return writes.Total("update", "DeferRun/status") >= len(burst)
		}); err != nil {
			return fmt.Errorf("burst bookkeeping: %w", err)
		}
		logf("burst bookkeeping done: CPU seconds %s", cpuDelta(cpu0, cpuTimes()))
		return nil
	})
	if err != nil {
		return err
	}
	if *apiProfile != "" {
		if err := <-apiProf; err != nil {
			return fmt.Errorf("apiserver profile: %w", err)
		}
	}
	bl := seen.latencies(burstNames)
	logf("burst: p50 %s p99 %s max %s", pct(bl, 50), pct(bl, 99), pct(bl, 100))
	logf("burst and bookkeeping: CPU seconds by part %s", partsString(burstCPU))
	h3 := heapMiB()
	logf("heap %.1f MiB after the burst", h3)
	if *memProfile != "" {
		f, _ := os.Create(*memProfile + ".goroutines")
		_ = pprof.Lookup("goroutine").WriteTo(f, 1)
		f.Close()
		f, _ = os.Create(*memProfile + ".burst")
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}
	floorP99, ratio := "", ""
	if fl != nil {
		res, err := fl.run(ctx, c, seen)
		if err != nil {
			return err
		}
		logf("floor: p50 %s p99 %s max %s, %s wall, CPU seconds by part %s", pct(res.latencies, 50), pct(res.latencies, 99), pct(res.latencies, 100), res.wall.Round(time.Millisecond), partsString(res.cpu))
		logf("floor: end seen by the reactor p50 %s p99 %s; create returned p50 %s p99 %s", pct(res.seen, 50), pct(res.seen, 99), pct(res.created, 50), pct(res.created, 99))
		floorP99 = fmt.Sprintf(" floor_p99_ms=%d", pct(res.latencies, 99).Milliseconds())
		ratio = fmt.Sprintf(" floor_ratio=%.2f", float64(pct(bl, 99))/float64(pct(res.latencies, 99)))
	}
	mgrCPU := fmt.Sprintf("mgr_cpu_s_per_1k_arm=%.2f mgr_cpu_s_per_1k_burst=%.2f",
		armCPU["manager"]*1000/float64(*nPods), burstCPU["manager"]*1000/float64(len(burst)))

	steady := make([]int, 0, steadyN)
	for i := 0; i < steadyN && *nBurst+i < *nPods; i++ {
		steady = append(steady, *nBurst+i)
	}
	var sl []time.Duration
	var perRun float64
	if len(steady) > 0 {
		if sl, perRun, err = steadyPhase(ctx, c, seen, writes, steady); err != nil {
			return err
		}
	}

	if *nNodes > 1 {
		fmt.Printf("RESULT bench=controller-%dnodes p50_ms=%d p99_ms=%d%s%s heap_mib=%.1f %s\n",
			*nNodes, pct(bl, 50).Milliseconds(), pct(bl, 99).Milliseconds(), floorP99, ratio, h3-h0, mgrCPU)
		return nil
	}
	fmt.Printf("RESULT bench=controller p50_ms=%d p99_ms=%d%s%s steady_p99_ms=%d heap_mib_per_10k=%.1f unmanaged_heap_mib=%.1f writes_per_run=%.1f %s\n",
		pct(bl, 50).Milliseconds(), pct(bl, 99).Milliseconds(), floorP99, ratio, pct(sl, 99).Milliseconds(), perTenK, unmanaged, perRun, mgrCPU)
	return nil
}

// createManaged creates the managed pods, running, with their work PVCs,
// and waits until every one is armed.
func parallel(n, par int, f func(i int) error) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("timed out after %s", timeout)
}
