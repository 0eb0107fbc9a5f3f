package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

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
