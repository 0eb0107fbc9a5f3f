package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// The scale benchmark (`make bench-scale`, or -scale N) checks issue #12's
// bound: a stage-out of N empty files stays under the stage step's memory
// limit. It runs kdefer-stage alone, as the defer pod does (GOMEMLIMIT from
// the limit, TMPDIR for the spilled file list and manifest): the peers would
// take hours at a million objects and are not what is measured.
const (
	// scaleLimitMiB is controller/deferpod.go's stageMemoryLimit.
	scaleLimitMiB = 256
	// scaleHeading starts results.md's scale section; the peer comparison
	// and the scale run each rewrite only their own part of the file.
	scaleHeading = "## Scale: kdefer-stage alone"
)

var scale = flag.Int("scale", 0, "instead of the peer comparison, upload this many empty files with kdefer-stage alone under the defer pod's memory limit")

// scaleShape spreads n files over 100 directories of up to 100
// subdirectories each (100 files a leaf directory at a million).
func scaleShape(n int) shape {
	return shape{name: fmt.Sprintf("%dx0B", n), files: n, dirs: 100, sub: 100}
}

func runScale(root, work, minioBin string) {
	sh := scaleShape(*scale)
	kbin := buildStage(root, work)
	st := startStore(*scaleServer, minioBin, filepath.Join(work, *scaleServer+"-data"))
	defer st.stop()
	ctx := context.Background()

	src := filepath.Join(work, "data", sh.name)
	log.Printf("generate %s", sh.name)
	start := time.Now()
	generate(src, sh)
	log.Printf("generated in %.0fs", time.Since(start).Seconds())

	tmp := filepath.Join(work, "tmp")
	check(os.MkdirAll(tmp, 0o755))
	prefix := "scale/" + sh.name + "/"
	url := "s3://" + bucket + "/" + prefix + "?endpoint=http://" + st.addr + "&region=us-east-1&use_path_style=true"
	// A progress line a minute, streamed to this log: a million-file run
	// takes an hour or more (the defer pod's default is every 10 s).
	c := exec.Command(kbin, "out", "--from", src, "--to", url, "--summary-file", "-", "--progress-interval", "60s")
	c.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+accessKey, "AWS_SECRET_ACCESS_KEY="+secretKey, "AWS_REGION=us-east-1",
		"GOMEMLIMIT="+strconv.Itoa(scaleLimitMiB)+"MiB", "TMPDIR="+tmp)
	log.Printf("upload %s with kdefer-stage to %s (GOMEMLIMIT=%dMiB, TMPDIR=%s)", sh.name, st.kind, scaleLimitMiB, tmp)
	loadStart, serverStart := loadAvg(), st.cpu()
	s := measureTmp(c, tmp, true)
	load, serverCPU := loadStart+"-"+loadAvg(), st.cpu()-serverStart
	log.Printf("upload %s: %.1fs client cpu %.1fs server cpu %.1fs rss %d MiB, TMPDIR peak %.1f MiB", sh.name, s.wall.Seconds(), s.cpu.Seconds(), serverCPU.Seconds(), s.rssKiB>>10, float64(s.tmpBytes)/(1<<20))

	// Every file and the manifest, counted in the store, not taken from
	// kdefer-stage's word.
	log.Printf("count objects under %s", prefix)
	n := count(ctx, st.client, prefix)
	if _, err := st.client.StatObject(ctx, bucket, prefix+"_kdefer/manifest.json", minio.StatObjectOptions{}); err != nil {
		log.Fatalf("no manifest: %v", err)
	}
	if n != sh.files+1 {
		log.Fatalf("kdefer-stage uploaded %d objects, want %d files and the manifest", n, sh.files)
	}

	rssMiB := float64(s.rssKiB) / 1024
	perFile := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(sh.files) }
	line := fmt.Sprintf("RESULT shape=%s op=upload tool=kdefer-stage server=%s wall_s=%.1f files_per_s=%.0f client_cpu_ms_per_file=%.2f server_cpu_ms_per_file=%.2f rss_mib=%.0f limit_mib=%d under_limit=%t tmp_mib=%.1f",
		sh.name, st.kind, s.wall.Seconds(), float64(sh.files)/s.wall.Seconds(), perFile(s.cpu), perFile(serverCPU), rssMiB, scaleLimitMiB, rssMiB < scaleLimitMiB, float64(s.tmpBytes)/(1<<20))
	fmt.Println(line)
	row := fmt.Sprintf("| %s | %s | %s | %s | %.1f | %.0f | %.1f | %.1f | %.0f | %d | %.1f |", sh.name, st.kind, time.Now().UTC().Format(time.DateOnly), load, s.wall.Seconds(),
		float64(sh.files)/s.wall.Seconds(), s.cpu.Seconds(), serverCPU.Seconds(), rssMiB, scaleLimitMiB, float64(s.tmpBytes)/(1<<20))
	writeScaleSection(*resultMD, sh.name, st.kind, row, line, commitOf(root))
}

// writeScaleSection replaces this shape's and server's row and RESULT line
// in the results file's scale section, keeping the others and the rest of
// the file.
func writeScaleSection(path, name, server, row, line, version string) {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		check(err)
	}
	check(os.WriteFile(path, []byte(withScaleRow(string(old), name, server, row, line, version)), 0o644))
	log.Printf("wrote %s", path)
}

// withScaleRow returns the results file md with its scale section rewritten:
// rows and RESULT lines are keyed by shape and server, so a run replaces its
// own earlier result and no other.
func withScaleRow(md, name, server, row, line, version string) string {
	head, section, _ := strings.Cut(md, scaleHeading)
	var rows, results []string
	for _, l := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(l, "| "+name+" | "+server+" |"),
			strings.HasPrefix(l, "RESULT shape="+name+" ") && strings.Contains(l, " server="+server+" "):
		case strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| shape"):
			rows = append(rows, l)
		case strings.HasPrefix(l, "RESULT "):
			results = append(results, l)
		}
	}
	rows, results = append(rows, row), append(results, line)
	var b strings.Builder
	b.WriteString(strings.TrimRight(head, "\n"))
	fmt.Fprintf(&b, "\n\n%s\n\nGenerated by `make bench-scale` (BENCH_SCALE files, default 1000000; BENCH_SCALE_SERVER, default versitygw). Empty files spread over 100x100 nested directories, uploaded once by kdefer-stage alone, in a child process with the defer pod's GOMEMLIMIT=%dMiB and its own TMPDIR, to the row's server on 127.0.0.1: `minio` is the MinIO above; `versitygw` is versitygw's posix gateway (embedgw, github.com/versity/versitygw as in go.mod) on a local directory, a real S3 server that costs far less CPU per empty object, so a million-file run fits in an hour on a shared machine. Every object and the manifest counted by listing afterwards. RSS = maxrss; TMPDIR peak = the largest total size of the (unlinked) spill files the process held open there, sampled every 250 ms; client/server CPU s = user+sys of kdefer-stage / of the server process during the upload; load avg = the machine's 1-minute load average at the upload's start and end (files/s is server-bound and only meaningful on an idle machine). The client's RSS is what is measured; the server is only the sink. %s, %s.\n\n", scaleHeading, scaleLimitMiB, runtime.Version(), version)
	fmt.Fprintf(&b, "| shape | server | date | load avg | wall s | files/s | client CPU s | server CPU s | peak RSS MiB | limit MiB | TMPDIR peak MiB |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	b.WriteString(strings.Join(rows, "\n"))
	fmt.Fprintf(&b, "\n\n```\n%s\n```\n", strings.Join(results, "\n"))
	return b.String()
}

// scaleSection returns results.md's scale section, for the peer comparison
// to keep when it rewrites the file.
func scaleSection() string {
	old, _ := os.ReadFile(*resultMD)
	if _, section, ok := strings.Cut(string(old), scaleHeading); ok {
		return "\n" + scaleHeading + section
	}
	return ""
}

func commitOf(root string) string {
	out, _ := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	return "kdefer-stage " + strings.TrimSpace(string(out))
}

// loadAvg is the machine's 1-minute load average.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f, _, _ := strings.Cut(string(data), " ")
	return f
}
