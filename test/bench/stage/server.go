package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kdefer/kdefer/test/s3server"
)

// The S3 server the benchmark writes to. The peer comparison always uses
// MinIO; the scale run uses versitygw's posix gateway by default, because
// MinIO spends ~2.9 ms of CPU on each empty object (versitygw ~0.9 ms;
// 20,000 files, results.md), which makes a million-object run take hours on
// a shared machine. Both are real S3 servers; the scale run measures the
// client, and the server is only the sink.
const (
	serverMinIO     = "minio"
	serverVersityGW = "versitygw"
)

// The peer comparison's server: MinIO by default, the store most sites run
// on premises. Its CPU (MD5 and HighwayHash of every byte, a part file and
// xl.meta per object) and its O_DIRECT waits bound most cells on a 2-core
// machine whatever the client does (test/bench/stage-runs.md); versitygw's posix
// gateway costs a fraction of that, so its cells show the clients' own
// differences.
var peerServer = flag.String("server", serverMinIO, "S3 server for the peer comparison: minio or versitygw (its posix gateway on a local directory, in a child process)")

var scaleServer = flag.String("scale-server", serverVersityGW, "S3 server for -scale: versitygw (its posix gateway on a local directory, in a child process) or minio (~3x the server CPU per empty object)")

// serverNames name the servers in the results' method line.
var serverNames = map[string]string{
	serverMinIO:     "MinIO",
	serverVersityGW: "versitygw posix gateway on a local directory",
}

// serverVersion is the server's version as the results file gives it: MinIO's
// from the directory test/tools/install.sh built it in, versitygw's from this
// binary's build information (the go.mod version).
func serverVersion(kind, minioBin string) string {
	if kind == serverMinIO {
		return filepath.Base(filepath.Dir(minioBin))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/versity/versitygw" {
				return "versitygw-" + m.Version
			}
		}
	}
	return kind
}

// store is a running S3 server with the benchmark's bucket made.
type store struct {
	kind   string
	addr   string
	client *minio.Client
	pid    int // the server's process, for its CPU time
	stop   func()
}

// startStore starts the given server on an empty dataDir (a reused -work
// holds the last run's bucket) and makes the benchmark's bucket.
func startStore(kind, minioBin, dataDir string) store {
	check(os.RemoveAll(dataDir))
	s := store{kind: kind, addr: freeAddr()}
	var srv *exec.Cmd
	switch kind {
	case serverMinIO:
		srv = startMinIO(minioBin, s.addr, dataDir)
	case serverVersityGW:
		srv = startVersityGW(s.addr, dataDir)
	default:
		log.Fatalf("S3 server %q (-server or -scale-server): want %s or %s", kind, serverMinIO, serverVersityGW)
	}
	s.pid = srv.Process.Pid
	s.stop = func() { _ = srv.Process.Kill(); _, _ = srv.Process.Wait() }
	client, err := minio.New(s.addr, &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	check(err)
	s.client = client
	check(client.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{Region: "us-east-1"}))
	return s
}

// cpu is the server process's user+system CPU time so far.
func (s store) cpu() time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.pid))
	check(err)
	d, err := statCPU(string(data))
	check(err)
	return d
}

// awaitIdle waits, up to limit, until the server has spent at most 2% of a
// core for a second (two 10 ms ticks of /proc's CPU time), and returns how
// long it waited. MinIO goes on working for 2-7 s after some runs, and a
// run that started then would pay for the one before it. (The first
// download of a shape paid far more, 4.9-6.5 s of MinIO CPU, for MinIO's
// first reads of objects just written, which waiting does not remove: the
// warm-up download in main does.)
func (s store) awaitIdle(limit time.Duration) time.Duration {
	const window = time.Second
	start := time.Now()
	last := s.cpu()
	for time.Since(start) < limit {
		time.Sleep(window)
		now := s.cpu()
		if now-last <= window/50 {
			break
		}
		last = now
	}
	return time.Since(start)
}

// statCPU returns utime+stime from a /proc/PID/stat line, in USER_HZ ticks
// of 10 ms (the value on every Linux architecture Go supports).
func statCPU(stat string) (time.Duration, error) {
	// The command name (field 2) may hold spaces and parentheses, so the
	// fields are counted from its closing parenthesis: state is field 3,
	// utime 14, stime 15.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc stat %q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc stat %q: %d fields after the command name, want at least 13", stat, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc stat utime/stime %q: %w", v, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

func startMinIO(bin, addr, dir string) *exec.Cmd {
	c := quiet(exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", freeAddr(), dir))
	c.Env = append(os.Environ(), "MINIO_ROOT_USER="+accessKey, "MINIO_ROOT_PASSWORD="+secretKey, "MINIO_BROWSER=off", "MINIO_UPDATE=off")
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	check(c.Start())
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/minio/health/cluster")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return c
			}
		}
		time.Sleep(100 * time.Millisecond) // poll the readiness endpoint
	}
	log.Fatal("minio did not become ready")
	return nil
}

// versitygw runs in a child process (this binary re-executed): embedgw allows
// one gateway per process and its posix backend changes the working
// directory, and a separate process has its own CPU time to measure.
const (
	versityDirEnv  = "KDEFER_BENCH_VERSITYGW_DIR"
	versityAddrEnv = "KDEFER_BENCH_VERSITYGW_ADDR"
)

func startVersityGW(addr, dir string) *exec.Cmd {
	check(os.MkdirAll(dir, 0o755))
	self, err := os.Executable()
	check(err)
	c := quiet(exec.Command(self))
	c.Env = append(os.Environ(), versityDirEnv+"="+dir, versityAddrEnv+"="+addr)
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	check(c.Start())
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return c
		}
		time.Sleep(50 * time.Millisecond) // poll until the gateway listens
	}
	log.Fatal("versitygw did not become ready")
	return nil
}

// runVersityGW is the child: the gateway on dir until killed.
func runVersityGW(dir, addr string) {
	check(s3server.RunVersityGW(context.Background(), filepath.Clean(dir), addr, accessKey, secretKey))
}
