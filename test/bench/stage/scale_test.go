package main

import (
	"strings"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	// A command name with spaces and a parenthesis must not shift the
	// fields: utime (14) = 150 ticks, stime (15) = 25 ticks.
	line := "4242 (minio (x) srv) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 12 0 500 1000 200 18446744073709551615\n"
	got, err := statCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1750 * time.Millisecond; got != want {
		t.Errorf("statCPU = %v, want %v", got, want)
	}
	for _, bad := range []string{"4242 minio S 1", "4242 (minio) S 1 2 3", "4242 (minio) S 1 4242 4242 0 -1 4194560 100 0 0 0 x 25"} {
		if _, err := statCPU(bad); err == nil {
			t.Errorf("statCPU(%q): no error", bad)
		}
	}
}

func TestWithScaleRowKeysByShapeAndServer(t *testing.T) {
	md := "# bench\n\npeer table\n\n" + scaleHeading + "\n\nold text\n\n| shape | server | date |\n|---|---|---|\n" +
		"| 100000x0B | minio | d1 |\n| 1000000x0B | minio | d2 |\n\n```\n" +
		"RESULT shape=100000x0B op=upload tool=kdefer-stage server=minio wall_s=1\n" +
		"RESULT shape=1000000x0B op=upload tool=kdefer-stage server=minio wall_s=2\n```\n"
	out := withScaleRow(md, "1000000x0B", "versitygw", "| 1000000x0B | versitygw | d3 |",
		"RESULT shape=1000000x0B op=upload tool=kdefer-stage server=versitygw wall_s=3", "v1")
	out = withScaleRow(out, "100000x0B", "minio", "| 100000x0B | minio | d4 |",
		"RESULT shape=100000x0B op=upload tool=kdefer-stage server=minio wall_s=4", "v2")
	if !strings.HasPrefix(out, "# bench\n\npeer table\n\n"+scaleHeading+"\n") {
		t.Errorf("the part before the scale section changed:\n%s", out)
	}
	if strings.Count(out, scaleHeading) != 1 || strings.Contains(out, "old text") || !strings.Contains(out, "v2") {
		t.Errorf("the section's text was not replaced once:\n%s", out)
	}
	for _, want := range []string{"| 1000000x0B | minio | d2 |", "| 1000000x0B | versitygw | d3 |", "| 100000x0B | minio | d4 |",
		"server=minio wall_s=2\n", "server=versitygw wall_s=3\n", "server=minio wall_s=4\n"} {
		if strings.Count(out, want) != 1 {
			t.Errorf("want %q once in:\n%s", want, out)
		}
	}
	for _, gone := range []string{"| d1 |", "wall_s=1\n"} {
		if strings.Contains(out, gone) {
			t.Errorf("the replaced result %q is still there:\n%s", gone, out)
		}
	}
}
