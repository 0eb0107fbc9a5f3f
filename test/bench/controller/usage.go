package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// children (the apiserver and etcd) from /proc, by command name.
func cpuTimes() map[string]time.Duration {
	out := map[string]time.Duration{}
	self := os.Getpid()
	read := func(pid string) (comm string, ppid int, cpu time.Duration, ok bool) {
		b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
		if err != nil {
			return "", 0, 0, false
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			return "", 0, 0, false
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			return "", 0, 0, false
		}
		var utime, stime int64
		for i, v := range map[int]any{1: &ppid, 11: &utime, 12: &stime} {
			if _, err := fmt.Sscan(f[i], v); err != nil {
				return "", 0, 0, false
			}
		}
		return s[open+1 : end], ppid, time.Duration(utime+stime) * 10 * time.Millisecond, true // USER_HZ 100
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		comm, ppid, cpu, ok := read(e.Name())
		if !ok {
			continue
		}
		if e.Name() == fmt.Sprint(self) {
			out["bench+manager"] += cpu
		} else if ppid == self {
			out[comm] += cpu
		}
	}
	return out
}

func cpuDelta(a, b map[string]time.Duration) string {
	var parts []string
	for k, v := range b {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, (v-a[k]).Seconds()))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func heapMiB() float64 {
	var m runtime.MemStats
	for i := 0; i < 2; i++ {
		runtime.GC()
	}
	debug.FreeOSMemory()
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}
