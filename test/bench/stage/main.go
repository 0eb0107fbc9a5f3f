// Command stage is `make bench-stage`: it measures kdefer-stage against
// s5cmd and mc on one local MinIO, uploads and downloads of three dataset
// shapes, alternating tools, median of several runs, and writes
// test/bench/results.md. Every tool runs as a child process so client CPU
// (rusage) and peak RSS (maxrss) are measured the same way for all.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kdefer/kdefer/stagecontract"
)

const (
	accessKey = "kdeferbench"
	secretKey = "kdeferbench-secret-key"
	bucket    = "bench"
)

type shape struct {
	name  string
	files int
	size  int64
	// dirs spreads files over nested directories: d<i%dirs>/s<i%sub>/f<i>
	dirs, sub int
	// allSums adds an upload by kdefer-stage with every checksum a
	// manifest can record (sumsTool), priced against the peers' uploads.
	allSums bool
}

var shapes = []shape{
	{"1000x1MiB", 1000, 1 << 20, 10, 10, true},
	{"4x256MiB", 4, 256 << 20, 1, 1, false},
	{"20000x4KiB", 20000, 4 << 10, 20, 50, false},
}

// sumsTool is kdefer-stage uploading with --checksums set to every optional
// checksum (MD5, SHA-256, Adler-32 on top of CRC32C, in the same read pass):
// what a policy asking for all of them costs (issue #16 item 4).
const sumsTool = "kdefer-sums"

type tool struct {
	name string
	bin  string
}

type sample struct {
	wall, cpu time.Duration
	sys       time.Duration // the part of cpu spent in the kernel
	server    time.Duration // the server's CPU during the run (0: not measured)
	rssKiB    int64
	tmpBytes  int64 // peak size of the files held open under spawnReq.TmpDir
}

type key struct{ shape, op, tool string }

var (
	runs     = flag.Int("runs", 3, "runs per tool, shape and direction (median reported)")
	only     = flag.String("shapes", "", "comma-separated shape names to run (default all)")
	workDir  = flag.String("work", "", "scratch directory (default a new temporary directory)")
	resultMD = flag.String("out", "test/bench/results.md", "results file")
)

func main() {
	if os.Getenv(spawnerEnv) == "1" {
		spawnerLoop()
		return
	}
	if dir := os.Getenv(versityDirEnv); dir != "" {
		runVersityGW(dir, os.Getenv(versityAddrEnv))
		return
	}
	flag.Parse()
	startSpawner()
	log.SetFlags(log.Ltime)
	root, err := os.Getwd()
	check(err)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		log.Fatal("run from the repository root (make bench-stage)")
	}
	work := *workDir
	if work == "" {
		work, err = os.MkdirTemp("", "kdefer-bench-")
		check(err)
		defer os.RemoveAll(work)
	}
	toolPath := func(name string) string {
		out, err := exec.Command(filepath.Join(root, "test/tools/install.sh"), "path", name).Output()
		check(err)
		p := filepath.Join(strings.TrimSpace(string(out)), name)
		if _, err := os.Stat(p); err != nil {
			log.Fatalf("%s not built: run test/tools/install.sh %s", p, name)
		}
		return p
	}
	if *scale > 0 {
		minioBin := ""
		if *scaleServer == serverMinIO {
			minioBin = toolPath("minio")
		}
		runScale(root, work, minioBin)
		return
	}
	minioBin, mcBin, s5Bin := toolPath("minio"), toolPath("mc"), toolPath("s5cmd")
	kbin := buildStage(root, work)

	dataDir := filepath.Join(work, "minio-data")
	st := startStore(serverMinIO, minioBin, dataDir)
	defer st.stop()
	addr, client := st.addr, st.client
	ctx := context.Background()

	env := append(os.Environ(),
		"AWS_ACCESS_KEY_ID="+accessKey, "AWS_SECRET_ACCESS_KEY="+secretKey, "AWS_REGION=us-east-1",
		"MC_HOST_local=http://"+accessKey+":"+secretKey+"@"+addr, "MC_CONFIG_DIR="+filepath.Join(work, "mc"))
	endpoint := "http://" + addr
	s3url := func(prefix string) string {
		return "s3://" + bucket + "/" + prefix + "?endpoint=" + endpoint + "&region=us-east-1&use_path_style=true"
	}
	tools := []tool{{"kdefer", kbin}, {"s5cmd", s5Bin}, {"mc", mcBin}}
	withSums := append(tools[:len(tools):len(tools)], tool{sumsTool, kbin})
	cmdFor := func(t tool, op, dir, prefix string) *exec.Cmd {
		var args []string
		switch t.name + "/" + op {
		case "kdefer/upload":
			args = []string{"out", "--from", dir, "--to", s3url(prefix), "--summary-file", "-", "--progress-interval", "-1s"}
		case sumsTool + "/upload":
			args = []string{"out", "--from", dir, "--to", s3url(prefix), "--summary-file", "-", "--progress-interval", "-1s",
				"--checksums", strings.Join(stagecontract.ManifestChecksums, ",")}
		case "kdefer/download":
			args = []string{"in", "--from", s3url(prefix), "--to", dir, "--summary-file", "-", "--progress-interval", "-1s"}
		case "s5cmd/upload":
			args = []string{"--endpoint-url", endpoint, "cp", dir + "/*", "s3://" + bucket + "/" + prefix}
		case "s5cmd/download":
			args = []string{"--endpoint-url", endpoint, "cp", "s3://" + bucket + "/" + prefix + "*", dir + "/"}
		case "mc/upload":
			args = []string{"--quiet", "cp", "-r", dir + "/", "local/" + bucket + "/" + prefix}
		case "mc/download":
			args = []string{"--quiet", "cp", "-r", "local/" + bucket + "/" + prefix, dir + "/"}
		}
		c := exec.Command(t.bin, args...)
		c.Env = env
		return c
	}

	// measureRun measures one tool's run, from the same memory state as
	// every other (settle: inputs, the source directory or the server's
	// data, in page cache, the rest free), with the server's CPU during it:
	// client and server share the 2 cores, so a run's wall time is bounded
	// by their sum, and the log shows which of the two it was.
	measureRun := func(c *exec.Cmd, inputs string) sample {
		settle(inputs)
		s0 := st.cpu()
		s := measure(c)
		s.server = st.cpu() - s0
		return s
	}
	logRun := func(op, shape, tool string, r int, s sample) {
		log.Printf("%-8s %-11s %-11s run %d: %6.2fs cpu %6.2fs (sys %5.2fs) server cpu %6.2fs rss %4d MiB",
			op, shape, tool, r, s.wall.Seconds(), s.cpu.Seconds(), s.sys.Seconds(), s.server.Seconds(), s.rssKiB>>10)
	}

	results := map[key][]sample{}
	bytesOf := map[string]int64{}
	selected := shapes
	if *only != "" {
		selected = nil
		for _, s := range shapes {
			if strings.Contains(","+*only+",", ","+s.name+",") {
				selected = append(selected, s)
			}
		}
	}
	for _, sh := range selected {
		src := filepath.Join(work, "data", sh.name)
		log.Printf("generate %s", sh.name)
		generate(src, sh)
		bytesOf[sh.name] = int64(sh.files) * sh.size

		// Upload: each run to a fresh prefix, removed afterwards so every
		// tool writes into the same, small bucket.
		upTools := tools
		if sh.allSums {
			upTools = withSums
		}
		for r := range *runs {
			for i := range upTools {
				t := upTools[(i+r)%len(upTools)] // alternate who goes first
				prefix := fmt.Sprintf("up/%s/%s/%d/", sh.name, t.name, r)
				s := measureRun(cmdFor(t, "upload", src, prefix), src)
				logRun("upload", sh.name, t.name, r, s)
				if n := count(ctx, client, prefix); n < sh.files {
					log.Fatalf("%s uploaded %d of %d objects", t.name, n, sh.files)
				}
				if t.name == sumsTool {
					checkAllSums(ctx, client, prefix)
				}
				results[key{sh.name, "upload", t.name}] = append(results[key{sh.name, "upload", t.name}], s)
				removePrefix(ctx, client, prefix, dataDir)
			}
		}
		// Download: one source prefix (without a manifest, so every tool
		// fetches the same objects), into a fresh directory each run.
		srcPrefix := "src/" + sh.name + "/"
		up := cmdFor(tools[0], "upload", src, srcPrefix)
		up.Stdout, up.Stderr = io.Discard, os.Stderr
		check(up.Run())
		check(client.RemoveObject(ctx, bucket, srcPrefix+"_kdefer/manifest.json", minio.RemoveObjectOptions{}))
		for r := range *runs {
			for i := range tools {
				t := tools[(i+r)%len(tools)]
				dst := filepath.Join(work, "dl", t.name)
				check(os.RemoveAll(dst))
				check(os.MkdirAll(dst, 0o755))
				s := measureRun(cmdFor(t, "download", dst, srcPrefix), dataDir)
				logRun("download", sh.name, t.name, r, s)
				if n := countFiles(dst); n != sh.files {
					log.Fatalf("%s downloaded %d of %d files", t.name, n, sh.files)
				}
				results[key{sh.name, "download", t.name}] = append(results[key{sh.name, "download", t.name}], s)
				check(os.RemoveAll(dst))
			}
		}
		removePrefix(ctx, client, srcPrefix, dataDir)
		check(os.RemoveAll(src))
	}

	report(selected, tools, results, bytesOf, minioBin, mcBin, s5Bin)
}

// checkAllSums fails the benchmark unless the manifest under prefix records
// every optional checksum for every file: a run that silently skipped the
// hashes would price nothing.
func checkAllSums(ctx context.Context, c *minio.Client, prefix string) {
	obj, err := c.GetObject(ctx, bucket, prefix+stagecontract.ManifestKey, minio.GetObjectOptions{})
	check(err)
	defer obj.Close()
	var m stagecontract.Manifest
	check(json.NewDecoder(obj).Decode(&m))
	for _, f := range m.Files {
		for _, name := range stagecontract.ManifestChecksums {
			if f.Checksums[name] == "" {
				log.Fatalf("%s: manifest has no %s for %s", sumsTool, name, f.Key)
			}
		}
	}
}

func buildStage(root, work string) string {
	kbin := filepath.Join(work, "kdefer-stage")
	log.Printf("build kdefer-stage")
	build := exec.Command("go", "build", "-trimpath", "-o", kbin, "./cmd/kdefer-stage")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	check(build.Run())
	return kbin
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().String()
}

// generate writes incompressible files; nested directories for many files.
func generate(dir string, sh shape) {
	r := rand.New(rand.NewPCG(uint64(sh.files), uint64(sh.size)))
	buf := make([]byte, min(sh.size, 4<<20))
	// One writer and one MkdirAll a directory: at a million files (the
	// scale shape) a new 1 MiB buffer and a MkdirAll per file add up.
	w := bufio.NewWriterSize(nil, 1<<20)
	made := map[string]bool{}
	for i := range sh.files {
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%sh.dirs), fmt.Sprintf("s%02d", (i/sh.dirs)%sh.sub), fmt.Sprintf("f%05d.dat", i))
		if d := filepath.Dir(p); !made[d] {
			check(os.MkdirAll(d, 0o755))
			made[d] = true
		}
		f, err := os.Create(p)
		check(err)
		w.Reset(f)
		for left := sh.size; left > 0; {
			n := min(left, int64(len(buf)))
			for j := 0; j < int(n); j += 8 {
				v := r.Uint64()
				for k := 0; k < 8 && j+k < int(n); k++ {
					buf[j+k] = byte(v >> (8 * k))
				}
			}
			_, err := w.Write(buf[:n])
			check(err)
			left -= n
		}
		check(w.Flush())
		check(f.Close())
	}
}

// Peak RSS needs care: Go starts children with vfork (CLONE_VM), and Linux
// carries the parent's high-water RSS into the child's ru_maxrss at exec. This
// program holds datasets and listings, so children it started directly
// reported its RSS, not theirs (every tool showed the same 79 MiB). Tools are
// therefore started by a spawner: this binary re-executed at the start, while
// it is still small, which does nothing but run commands and report rusage.
const spawnerEnv = "KDEFER_BENCH_SPAWNER"

type spawnReq struct {
	Args   []string
	Env    []string
	TmpDir string // when set, sample the size of the child's open files there
	Stream bool   // also copy the child's output to stderr as it comes (progress of a long run)
}

type spawnResp struct {
	Wall, CPU time.Duration
	Sys       time.Duration // the part of CPU spent in the kernel
	RSSKiB    int64
	TmpBytes  int64
	Err, Out  string
}

var spawner struct {
	enc *json.Encoder
	dec *json.Decoder
}

func startSpawner() {
	self, err := os.Executable()
	check(err)
	c := exec.Command(self)
	c.Env = append(os.Environ(), spawnerEnv+"=1")
	c.Stderr = os.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := c.StdinPipe()
	check(err)
	out, err := c.StdoutPipe()
	check(err)
	check(c.Start())
	spawner.enc, spawner.dec = json.NewEncoder(in), json.NewDecoder(out)
}

func spawnerLoop() {
	dec, enc := json.NewDecoder(os.Stdin), json.NewEncoder(os.Stdout)
	for {
		var req spawnReq
		if err := dec.Decode(&req); err != nil {
			return
		}
		c := exec.Command(req.Args[0], req.Args[1:]...)
		c.Env = req.Env
		var out strings.Builder
		var w io.Writer = &out
		if req.Stream {
			w = io.MultiWriter(&out, os.Stderr)
		}
		c.Stdout, c.Stderr = w, w // one writer: exec copies both through one pipe
		start := time.Now()
		err := c.Start()
		var tmpPeak int64
		if err == nil {
			stop := make(chan struct{})
			done := make(chan int64)
			go func() { done <- sampleOpenFiles(c.Process.Pid, req.TmpDir, stop) }()
			err = c.Wait()
			close(stop)
			tmpPeak = <-done
		}
		resp := spawnResp{Wall: time.Since(start), TmpBytes: tmpPeak, Out: tail(out.String(), 3000)}
		if err != nil {
			resp.Err = err.Error()
		}
		if c.ProcessState != nil {
			ru := c.ProcessState.SysUsage().(*syscall.Rusage)
			resp.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			resp.Sys = time.Duration(ru.Stime.Nano())
			resp.RSSKiB = ru.Maxrss
		}
		_ = enc.Encode(resp)
	}
}

// sampleOpenFiles returns the largest total size, sampled every 250 ms until
// stop, of the files under dir that process pid holds open. kdefer-stage
// unlinks its spill files at once, so only their descriptors show them.
func sampleOpenFiles(pid int, dir string, stop <-chan struct{}) int64 {
	if dir == "" {
		return 0
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	var peak int64
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return peak
		case <-t.C:
		}
		fds, _ := os.ReadDir(fdDir)
		var total int64
		for _, fd := range fds {
			p := filepath.Join(fdDir, fd.Name())
			if target, err := os.Readlink(p); err != nil || !strings.HasPrefix(target, dir+"/") {
				continue
			}
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				total += fi.Size()
			}
		}
		peak = max(peak, total)
	}
}

// settle brings the machine to the same memory state before every run:
// dirty pages written, the page cache dropped (root only) and the run's
// inputs read back into it. Without it a run's cost depended on what the
// runs before it had left: a download writes 1 GiB into the page cache,
// and once free memory is gone the writer reclaims pages as it goes, in
// its own system time. On a fresh 24 GiB machine kdefer's 4 x 256 MiB
// download took 0.88-0.98 s in five runs; with the page cache filled by
// builds first, 1.01-1.81 s, and s5cmd's 1.04-1.18 s became 1.17-2.04 s
// (issue #16: "each run slower").
func settle(inputs string) {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		dropOnce.Do(func() { log.Printf("cannot drop the page cache (%v): runs start from whatever the last one left", err) })
		return
	}
	check(filepath.WalkDir(inputs, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(io.Discard, f)
		return err
	}))
}

var dropOnce sync.Once

func measure(c *exec.Cmd) sample { return measureTmp(c, "", false) }

// measureTmp runs c in the spawner; with tmpDir, it also samples the size of
// the files c holds open there; with stream, c's output goes to stderr too.
func measureTmp(c *exec.Cmd, tmpDir string, stream bool) sample {
	// Flush the previous run's dirty pages first: otherwise the next tool
	// pays for its predecessor's writeback.
	syscall.Sync()
	check(spawner.enc.Encode(spawnReq{Args: c.Args, Env: c.Env, TmpDir: tmpDir, Stream: stream}))
	var resp spawnResp
	check(spawner.dec.Decode(&resp))
	if resp.Err != "" {
		log.Fatalf("%s: %s\n%s", strings.Join(c.Args, " "), resp.Err, resp.Out)
	}
	return sample{wall: resp.Wall, cpu: resp.CPU, sys: resp.Sys, rssKiB: resp.RSSKiB, tmpBytes: resp.TmpBytes}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func count(ctx context.Context, c *minio.Client, prefix string) int {
	n := 0
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		check(o.Err)
		n++
	}
	return n
}

func countFiles(dir string) int {
	n := 0
	check(filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	}))
	return n
}

// removePrefix deletes a prefix and purges MinIO's trash, which otherwise
// piles up (tens of GB in a benchmark).
func removePrefix(ctx context.Context, c *minio.Client, prefix, dataDir string) {
	objs := c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true})
	for e := range c.RemoveObjects(ctx, bucket, objs, minio.RemoveObjectsOptions{}) {
		check(e.Err)
	}
	trash := filepath.Join(dataDir, ".minio.sys", "tmp", ".trash")
	entries, _ := os.ReadDir(trash)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(trash, e.Name()))
	}
}

type stat struct {
	wall, cpu time.Duration
	rssMiB    float64
}

func median(ss []sample) stat {
	walls := make([]time.Duration, len(ss))
	cpus := make([]time.Duration, len(ss))
	rss := make([]int64, len(ss))
	for i, s := range ss {
		walls[i], cpus[i], rss[i] = s.wall, s.cpu, s.rssKiB
	}
	sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
	sort.Slice(cpus, func(i, j int) bool { return cpus[i] < cpus[j] })
	sort.Slice(rss, func(i, j int) bool { return rss[i] < rss[j] })
	m := len(ss) / 2
	return stat{wall: walls[m], cpu: cpus[m], rssMiB: float64(rss[len(rss)-1]) / 1024} // peak RSS: the worst run
}

func report(selected []shape, tools []tool, results map[key][]sample, bytesOf map[string]int64, minioBin, mcBin, s5Bin string) {
	var md strings.Builder
	host, _ := os.Hostname()
	cpuModel := "unknown"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, cpuModel, _ = strings.Cut(l, ": ")
				break
			}
		}
	}
	var memKiB int64
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		// Without a MemTotal line the report says 0.0 GiB: a detail of
		// the machine line, not a reason to fail the benchmark.
		_, _ = fmt.Sscanf(string(data), "MemTotal: %d kB", &memKiB)
	}
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	fmt.Fprintf(&md, "# kdefer-stage benchmark\n\nGenerated by `make bench-stage` (test/bench/stage). Do not edit by hand.\n\n")
	fmt.Fprintf(&md, "- Date: %s\n- Machine: %s, %d CPUs (%s), %.1f GiB RAM, %s/%s\n", time.Now().UTC().Format(time.RFC3339), host, runtime.NumCPU(), strings.TrimSpace(cpuModel), float64(memKiB)/(1<<20), runtime.GOOS, runtime.GOARCH)
	// The tools are built from the module proxy without release ldflags, so
	// they report "DEVELOPMENT"; the pinned module version is in the path
	// test/tools/install.sh builds them under.
	ver := func(bin string) string { return filepath.Base(filepath.Dir(bin)) }
	fmt.Fprintf(&md, "- Versions: kdefer-stage %s (%s), %s, %s, %s (as pinned in test/tools/install.sh)\n", strings.TrimSpace(string(commit)), runtime.Version(), ver(minioBin), ver(mcBin), ver(s5Bin))
	fmt.Fprintf(&md, "- Method: one MinIO on 127.0.0.1 (client and server share the CPUs); before each run dirty pages written, the page cache dropped and the run's inputs (the source files, or the server's data) read back into it, the rest of memory free; %d runs per cell alternating tool order, median wall time and CPU, peak RSS of the worst run; client CPU = user+sys of the tool's process (rusage), RSS = its maxrss. Each tool uses its default concurrency (kdefer-stage 16). %s is kdefer-stage out --checksums %s: every checksum a manifest can record besides CRC32C, in the same read pass.\n\n", *runs, sumsTool, strings.Join(stagecontract.ManifestChecksums, ","))
	fmt.Fprintf(&md, "| shape | op | tool | wall s | MB/s | files/s | client CPU s/GB | peak RSS MiB |\n|---|---|---|---|---|---|---|---|\n")
	var lines []string
	for _, sh := range selected {
		for _, op := range []string{"upload", "download"} {
			st := map[string]stat{}
			cells := tools
			if op == "upload" && sh.allSums {
				cells = append(tools[:len(tools):len(tools)], tool{name: sumsTool})
			}
			for _, t := range cells {
				st[t.name] = median(results[key{sh.name, op, t.name}])
				s := st[t.name]
				gb := float64(bytesOf[sh.name]) / 1e9
				fmt.Fprintf(&md, "| %s | %s | %s | %.2f | %.0f | %.0f | %.2f | %.0f |\n", sh.name, op, t.name, s.wall.Seconds(),
					float64(bytesOf[sh.name])/1e6/s.wall.Seconds(), float64(sh.files)/s.wall.Seconds(), s.cpu.Seconds()/gb, s.rssMiB)
			}
			for _, kt := range []string{"kdefer", sumsTool} {
				k, ok := st[kt]
				if !ok {
					continue
				}
				sums := ""
				if kt == sumsTool {
					sums = " checksum=all"
				}
				for _, vs := range []string{"s5cmd", "mc"} {
					o := st[vs]
					line := fmt.Sprintf("RESULT shape=%s op=%s%s vs=%s throughput_ratio=%.2f cpu_ratio=%.2f rss_mib=%.0f",
						sh.name, op, sums, vs, o.wall.Seconds()/k.wall.Seconds(), k.cpu.Seconds()/o.cpu.Seconds(), k.rssMiB)
					if vs == "s5cmd" {
						fmt.Println(line)
					}
					lines = append(lines, line)
				}
			}
		}
	}
	fmt.Fprintf(&md, "\nRatios (kdefer-stage against each peer: throughput_ratio > 1 is faster, cpu_ratio < 1 is cheaper):\n\n```\n%s\n```\n", strings.Join(lines, "\n"))
	md.WriteString(scaleSection())
	check(os.WriteFile(*resultMD, []byte(md.String()), 0o644))
	log.Printf("wrote %s", *resultMD)
}
