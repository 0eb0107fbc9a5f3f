// Command stage is `make bench-stage`: it measures kdefer-stage against
// s5cmd and mc on one local MinIO, uploads and downloads of three dataset
// shapes, alternating tools, median of several runs, and writes
// test/bench/results.md. Every tool runs as a child process so client CPU
// (rusage) and peak RSS (maxrss) are measured the same way for all.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	resultMD = flag.String("out", "", "results file (default test/bench/results.md, or test/bench/results-<server>.md for another -server)")
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
	if *resultMD == "" {
		*resultMD = "test/bench/results.md"
		if *peerServer != serverMinIO && *scale == 0 {
			*resultMD = "test/bench/results-" + *peerServer + ".md"
		}
	}
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
	server := *peerServer
	if *scale > 0 {
		server = *scaleServer
	}
	minioBin := ""
	if server == serverMinIO {
		minioBin = toolPath("minio")
	}
	if *scale > 0 {
		runScale(root, work, minioBin)
		return
	}
	mcBin, s5Bin := toolPath("mc"), toolPath("s5cmd")
	kbin := buildStage(root, work)

	dataDir := filepath.Join(work, *peerServer+"-data")
	st := startStore(*peerServer, minioBin, dataDir)
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
	// data, in page cache, the rest free; the server idle), with the
	// server's CPU during it:
	// client and server share the 2 cores, so a run's wall time is bounded
	// by their sum, and the log shows which of the two it was.
	measureRun := func(c *exec.Cmd, inputs string) sample {
		settle(inputs)
		if w := st.awaitIdle(time.Minute); w > 2*time.Second {
			log.Printf("waited %.1fs for the server to go idle", w.Seconds())
		}
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
		check(quiet(cmdFor(tools[0], "upload", src, srcPrefix)).Run())
		check(client.RemoveObject(ctx, bucket, srcPrefix+"_kdefer/manifest.json", minio.RemoveObjectOptions{}))
		// One download first, not measured: MinIO's first listing and reads
		// of objects just written cost it 4.9-6.5 s of CPU (1000 x 1 MiB;
		// 1.1-1.5 s in every run after), which the first measured run, always
		// the same tool's, paid.
		warm := filepath.Join(work, "dl", "warm-up")
		check(os.MkdirAll(warm, 0o755))
		check(quiet(cmdFor(tools[0], "download", warm, srcPrefix)).Run())
		check(os.RemoveAll(warm))
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

	report(selected, tools, results, bytesOf, serverVersion(*peerServer, minioBin), mcBin, s5Bin)
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

// quiet discards c's output but its errors.
func quiet(c *exec.Cmd) *exec.Cmd {
	c.Stdout, c.Stderr = io.Discard, os.Stderr
	return c
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
