package nodelogs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
)

// The load of BenchmarkKeep100Pods: a node's worth of kept pods, each
// container writing as a busy batch pod's does.
const (
	benchPods       = 100
	benchContainers = 2
	benchLinesPerS  = 20 // per container
	// benchSlice is one slice of the writing phase: the writers write to
	// the kept pods' directories or to the unwatched ones, slice by slice.
	benchSlice = 500 * time.Millisecond
	// benchIdle is the phase in which the spool holds the pods and nothing
	// is written: one Resync.
	benchIdle = DefaultResync
	// benchSettle is how long benchRotate gives the spool to handle the
	// rotations' events: well above what it takes.
	benchSettle = 300 * time.Millisecond
)

// benchSlices orders the writing phase's slices: W a warm-up into the
// unwatched directories (not measured: the process's first writers pay for
// its threads and its heap), then A (unwatched) and B (kept) as ABBAABBA,
// which cancels a load that drifts linearly on a shared machine. Each of
// A and B gets 2 s in all.
const benchSlices = "WABBAABBA"

// halfway is the slice before whose first line each writer rotates its
// file of kind (A or B): the first after half of that kind's slices.
func halfway(kind byte) int {
	seen := 0
	for i := range len(benchSlices) {
		if benchSlices[i] == kind {
			if seen == strings.Count(benchSlices, string(kind))/2 {
				return i
			}
			seen++
		}
	}
	panic("no slice " + string(kind))
}

// benchLine is a line's text after the CRI prefix: 85 bytes, a line ~125.
const benchLine = "step 001234/100000 loss=0.012345 lr=0.000300 throughput=1234.5 samples/s eta=01:23:45"

// BenchmarkKeep100Pods measures the node agent's own cost of keeping 100
// pods' logs: the spool's CPU while 100 pods × 2 containers write CRI
// lines at 20 lines/s each (4,000 lines/s in all, each container a busy
// batch pod's) with one rotation per container, and the heap the spool
// holds for them.
//
// The spool and its writers share the process, so the spool's CPU is the
// process's (getrusage) less the writers'. The same writer goroutines
// write, slice by slice (benchSlices), either to the kept pods' log
// directories (B) or to the same tree that nobody watches (A): a peer
// measured in the same run, interleaved with the measurement. Then:
//
//   - idle: the spool's CPU while it holds the pods and nothing is written
//     (its rescans every Resync), measured before the writing phase;
//   - cpu-ms/100pods/s: the spool's CPU per wall second while they write,
//     B - A + idle (A and B both include the rescans). It includes the
//     kernel's queueing of an inotify event in each write(2), charged here
//     to the writers' threads but caused by the spool's watch (on a node,
//     the runtime's shim pays it);
//   - rotate-cpu-ms/200ctrs: one more rotation of every container with
//     nothing written, less the same rotations in the unwatched tree;
//   - heap-KiB/100pods: HeapInuse after a GC with the spool holding the
//     100 pods, less before the spool existed (the spans, hence partly the
//     heap's fragmentation); heap-live-KiB/100pods the same of HeapAlloc,
//     the live objects' bytes.
//
// Numbers only, no bounds: goals live in the benchmark's output.
func BenchmarkKeep100Pods(b *testing.B) {
	var sum benchResult
	for range b.N {
		sum.add(benchKeepOnce(b))
	}
	r := sum.div(b.N)
	b.ReportMetric(0, "ns/op") // an iteration is fixed windows
	b.ReportMetric(r.spoolCPU, "cpu-ms/100pods/s")
	b.ReportMetric(r.idleCPU, "idle-cpu-ms/100pods/s")
	b.ReportMetric(r.writersCPU, "writers-cpu-ms/s")
	b.ReportMetric(r.keepCPU, "keep-cpu-ms/100pods")
	b.ReportMetric(r.rotateCPU, "rotate-cpu-ms/200ctrs")
	b.ReportMetric(r.heapKiB, "heap-KiB/100pods")
	b.ReportMetric(r.liveKiB, "heap-live-KiB/100pods")
	b.ReportMetric(r.watches, "inotify-watches")
	b.ReportMetric(r.linesPerS, "lines/s")
	b.Logf("RESULT nodelogs pods=%d containers=%d lines_per_s=%.0f cpu_ms_per_s=%.1f heap_kib=%.0f writers_cpu_ms_per_s=%.1f heap_live_kib=%.0f idle_cpu_ms_per_s=%.1f rotate_cpu_ms=%.1f keep_cpu_ms=%.1f inotify_watches=%.0f",
		benchPods, benchContainers, r.linesPerS, r.spoolCPU, r.heapKiB, r.writersCPU, r.liveKiB, r.idleCPU, r.rotateCPU, r.keepCPU, r.watches)
}

type benchResult struct {
	spoolCPU, idleCPU, writersCPU float64 // CPU ms per wall second
	keepCPU                       float64 // CPU ms of the 100 Keeps
	rotateCPU                     float64 // CPU ms of handling 200 rotations
	heapKiB, liveKiB              float64 // HeapInuse, HeapAlloc
	watches, linesPerS            float64
}

func (r *benchResult) add(o benchResult) {
	r.spoolCPU += o.spoolCPU
	r.idleCPU += o.idleCPU
	r.writersCPU += o.writersCPU
	r.keepCPU += o.keepCPU
	r.rotateCPU += o.rotateCPU
	r.heapKiB += o.heapKiB
	r.liveKiB += o.liveKiB
	r.watches += o.watches
	r.linesPerS += o.linesPerS
}

func (r benchResult) div(n int) benchResult {
	f := float64(n)
	return benchResult{r.spoolCPU / f, r.idleCPU / f, r.writersCPU / f, r.keepCPU / f, r.rotateCPU / f, r.heapKiB / f, r.liveKiB / f, r.watches / f, r.linesPerS / f}
}

func benchKeepOnce(b *testing.B) benchResult {
	b.Helper()
	root := b.TempDir() // one file system for the pod logs and the spool
	pods := make([]Pod, benchPods)
	for i := range pods {
		pods[i] = Pod{Namespace: "batch", Name: fmt.Sprintf("job-%03d-x7k2p", i), UID: types.UID(fmt.Sprintf("3f1c9a2e-0000-4000-8000-%012d", i))}
	}
	ctrs := []string{"main", "sidecar"}
	s := &Spool{PodLogsDir: filepath.Join(root, "pods"), Dir: filepath.Join(root, "spool"), Log: logr.Discard()}
	kept := benchDirs(b, s.PodLogsDir, pods, ctrs)
	peer := benchDirs(b, filepath.Join(root, "peer"), pods, ctrs)
	heapBefore, allocBefore := heap()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	}()
	for !s.running() {
		time.Sleep(time.Millisecond)
	}

	cpu0 := cpuTime()
	for _, p := range pods {
		s.Keep(p)
	}
	keepCPU := cpuTime() - cpu0

	start, cpu0 := time.Now(), cpuTime()
	time.Sleep(benchIdle)
	idle := perSecond(cpuTime()-cpu0, time.Since(start))

	w := benchWrite(b, kept, peer)
	benchWaitLinks(b, s, pods, ctrs, 2) // the live file and the rotated one

	rotCPU := benchRotate(b, kept)
	peerRotCPU := benchRotate(b, peer)
	benchWaitLinks(b, s, pods, ctrs, 3)

	heapAfter, allocAfter := heap()
	watches, ok := inotifyWatches()
	if !ok { // no /proc: the directories the spool asked to watch
		watches = 1 + benchPods*(1+benchContainers)
	}
	runtime.KeepAlive(s)

	r := benchResult{
		spoolCPU:   w.b - w.a + idle,
		idleCPU:    idle,
		writersCPU: w.a - idle,
		keepCPU:    ms(keepCPU),
		rotateCPU:  ms(rotCPU - peerRotCPU),
		heapKiB:    (float64(heapAfter) - float64(heapBefore)) / 1024,
		liveKiB:    (float64(allocAfter) - float64(allocBefore)) / 1024,
		watches:    float64(watches),
		linesPerS:  w.linesPerS,
	}
	rotPerS := r.rotateCPU / (float64(strings.Count(benchSlices, "B")) * benchSlice.Seconds())
	events := r.spoolCPU - r.idleCPU - rotPerS
	b.Logf("CPU-ms/s of the process by slice: A (unwatched) %s, B (kept) %s. The spool's %.1f (B-A system %.1f): rescans %.1f, rotations %.1f, the rest %.1f (%.1f µs a line written)",
		w.slices['A'], w.slices['B'], r.spoolCPU, w.sysB-w.sysA, r.idleCPU, rotPerS, events, events/r.linesPerS*1000)
	return r
}

func (s *Spool) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w != nil
}

// benchDirs makes each container's log directory under root with an
// empty live file, as the kubelet and the runtime do when it starts, and
// returns the directories.
func benchDirs(b *testing.B, root string, pods []Pod, ctrs []string) []string {
	b.Helper()
	var dirs []string
	for _, p := range pods {
		for _, ctr := range ctrs {
			dir := filepath.Join(root, p.dirName(), ctr)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "0.log"), nil, 0o640); err != nil {
				b.Fatal(err)
			}
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// benchWritten is the writing phase's CPU: a and b the process's CPU-ms
// per wall second over the A and the B slices (sysA and sysB the system
// part), slices each slice's.
type benchWritten struct {
	a, b, sysA, sysB, linesPerS float64
	slices                      map[byte]benchSamples
}

type benchSamples []float64

func (s benchSamples) String() string {
	f := make([]string, len(s))
	for i, v := range s {
		f[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(f, " ")
}

// benchWrite plays the runtime: a goroutine per container appends
// benchLinesPerS CRI lines a second, one write(2) a line, the writers'
// starts spread over a line's interval, to its file in kept or in peer
// as benchSlices says for the moment the line is due; before its first
// line of slice halfway('B') (halfway('A')) it plays the kubelet's
// rotation of its kept (peer) file, 0.log renamed to 0.log.YYYYMMDD-hhmmss,
// and the runtime's reopen of a new 0.log. The process's CPU time is
// sampled at every slice's end.
func benchWrite(b *testing.B, kept, peer []string) benchWritten {
	b.Helper()
	interval := time.Second / benchLinesPerS
	lines := len(benchSlices) * int(benchSlice/interval)
	start := time.Now().Add(10 * time.Millisecond) // the goroutines started
	var wg sync.WaitGroup
	errs := make(chan error, len(kept))
	for i := range kept {
		first := start.Add(interval * time.Duration(i) / time.Duration(len(kept)))
		wg.Go(func() {
			if err := benchWriter(kept[i], peer[i], start, first, interval, lines); err != nil {
				errs <- err
			}
		})
	}
	w := benchWritten{slices: map[byte]benchSamples{}}
	var wall [2]time.Duration
	var cpu [2]time.Duration
	time.Sleep(time.Until(start.Add(benchSlice)))
	var sys [2]time.Duration
	t0 := time.Now()
	user0, sys0 := cpuTimes()
	for k := 1; k < len(benchSlices); k++ {
		time.Sleep(time.Until(start.Add(benchSlice * time.Duration(k+1))))
		t1 := time.Now()
		user1, sys1 := cpuTimes()
		kind := benchSlices[k]
		c := user1 + sys1 - user0 - sys0
		w.slices[kind] = append(w.slices[kind], perSecond(c, t1.Sub(t0)))
		wall[kind-'A'] += t1.Sub(t0)
		cpu[kind-'A'] += c
		sys[kind-'A'] += sys1 - sys0
		t0, user0, sys0 = t1, user1, sys1
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	w.a = perSecond(cpu[0], wall[0])
	w.b = perSecond(cpu[1], wall[1])
	w.sysA = perSecond(sys[0], wall[0])
	w.sysB = perSecond(sys[1], wall[1])
	w.linesPerS = float64(len(kept)) * benchLinesPerS
	return w
}

// benchWriter writes one container's lines, due at first + n×interval.
func benchWriter(kept, peer string, start, first time.Time, interval time.Duration, lines int) error {
	type file struct {
		live string
		f    *os.File
	}
	open := func(live string) (*os.File, error) {
		return os.OpenFile(live, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	}
	var files [2]file
	for i, dir := range []string{peer, kept} {
		live := filepath.Join(dir, "0.log")
		f, err := open(live)
		if err != nil {
			return err
		}
		defer func() { _ = files[i].f.Close() }()
		files[i] = file{live, f}
	}
	rotateA, rotateB := halfway('A'), halfway('B')
	buf := make([]byte, 0, 256)
	last := -1
	for n := range lines {
		due := first.Add(interval * time.Duration(n))
		slice := int(due.Sub(start) / benchSlice)
		i := 0 // A and W: the unwatched file
		if benchSlices[slice] == 'B' {
			i = 1
		}
		time.Sleep(time.Until(due)) // a rotation too falls in its slice
		if slice != last && (slice == rotateA || slice == rotateB) {
			if err := rotate(files[i].live); err != nil {
				return err
			}
			_ = files[i].f.Close()
			f, err := open(files[i].live)
			if err != nil {
				return err
			}
			files[i].f = f
		}
		last = slice
		buf = time.Now().UTC().AppendFormat(buf[:0], time.RFC3339Nano)
		buf = append(buf, " stdout F "...)
		buf = append(buf, benchLine...)
		buf = append(buf, '\n')
		if _, err := files[i].f.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// benchRotate rotates every directory's live file as the kubelet does and
// creates the next one as the runtime does, and returns the process's CPU
// time over that and benchSettle.
func benchRotate(b *testing.B, dirs []string) time.Duration {
	b.Helper()
	cpu0 := cpuTime()
	for _, dir := range dirs {
		live := filepath.Join(dir, "0.log")
		if err := rotate(live); err != nil {
			b.Fatal(err)
		}
		f, err := os.OpenFile(live, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
	time.Sleep(benchSettle)
	return cpuTime() - cpu0
}

// rotate renames the live file to the kubelet's rotated name.
func rotate(live string) error {
	return os.Rename(live, live+"."+time.Now().UTC().Format("20060102-150405"))
}

// benchWaitLinks waits until the spool holds n links of every container.
func benchWaitLinks(b *testing.B, s *Spool, pods []Pod, ctrs []string, n int) {
	b.Helper()
	deadline := time.Now().Add(3 * DefaultResync)
	for _, p := range pods {
		for _, ctr := range ctrs {
			for {
				links, err := listLinks(filepath.Join(s.Dir, string(p.UID), ctr))
				if err != nil {
					b.Fatal(err)
				}
				if len(links) == n {
					break
				}
				if time.Now().After(deadline) {
					files, _ := list(filepath.Join(s.PodLogsDir, p.dirName(), ctr))
					var names []string
					for _, f := range files {
						names = append(names, f.name)
					}
					b.Fatalf("pod %s container %s: %d links of %s, want %d", p.Name, ctr, len(links), strings.Join(names, " "), n)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	user, sys := cpuTimes()
	return user + sys
}

func cpuTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func perSecond(cpu, wall time.Duration) float64 { return ms(cpu) / wall.Seconds() }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// heap returns the heap's spans in use and its live bytes after a GC.
func heap() (inuse, alloc uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.HeapAlloc
}

// inotifyWatches counts the watches of the process's inotify instances
// as the kernel lists them in /proc/self/fdinfo.
func inotifyWatches() (int, bool) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err != nil || target != "anon_inode:inotify" {
			continue
		}
		f, err := os.Open(filepath.Join("/proc/self/fdinfo", fd.Name()))
		if err != nil {
			return 0, false
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "inotify wd:") {
				n++
			}
		}
		_ = f.Close()
	}
	return n, true
}
