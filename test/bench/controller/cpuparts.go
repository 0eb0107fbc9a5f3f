package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
)

// The bench and the manager share a process, so the manager's CPU time is
// told apart by profile labels: the manager is built and started under
// part=manager, the floor's reactor under part=floor, and goroutines inherit
// their creator's labels (the manager's informers, workers, webhook server
// and its own connection's goroutines included). Unlabelled samples are the
// bench's own work and the runtime's background GC workers, which serve
// every part; a part's share excludes them (its GC assists are counted).

// profileParts profiles the process's CPU while f runs and returns the CPU
// seconds of each value of the label part ("" for unlabelled samples); with
// a path, the profile is also written there.
func profileParts(path string, f func() error) (map[string]float64, error) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, err
	}
	ferr := f()
	pprof.StopCPUProfile()
	if ferr != nil {
		return nil, ferr
	}
	if path != "" {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		return nil, fmt.Errorf("parsing CPU profile: %w", err)
	}
	cpu := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, fmt.Errorf("CPU profile without cpu/nanoseconds samples")
	}
	out := map[string]float64{}
	for _, s := range p.Sample {
		part := ""
		if v := s.Label["part"]; len(v) > 0 {
			part = v[0]
		}
		out[part] += float64(s.Value[cpu]) / 1e9
	}
	return out, nil
}

// partsString prints parts' CPU seconds in a stable order.
func partsString(parts map[string]float64) string {
	var out []string
	for k, v := range parts {
		if k == "" {
			k = "bench+gc"
		}
		out = append(out, fmt.Sprintf("%s %.2f", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
