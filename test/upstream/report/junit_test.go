package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// report writes a Ginkgo JUnit report of the given testcases.
func report(t *testing.T, cases string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "r.xml")
	doc := `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5"><testsuite name="Kubernetes e2e suite (apps)">
<testcase name="[SynchronizedBeforeSuite]" status="passed"></testcase>
<testcase name="[It] [sig-node] Pods should be other specs" status="failed"><failure message="not ours"></failure></testcase>
` + cases + `</testsuite></testsuites>`
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var focus = regexp.MustCompile(`\[sig-apps\] (Job|CronJob) `)

func TestCompare(t *testing.T) {
	base, err := readRun("baseline", report(t, `
<testcase name="[It] [sig-apps] Job should run" status="passed"></testcase>
<testcase name="[It] [sig-apps] Job should fail early" status="passed"></testcase>
<testcase name="[It] [sig-apps] CronJob should wait [Slow]" status="skipped"><skipped message="skipped"></skipped></testcase>
<testcase name="[It] [sig-apps] CronJob should need DNS" status="failed"><failure message="no DNS&#xA;more"></failure></testcase>
<testcase name="[It] [sig-apps] Job should need a feature" status="skipped"><skipped message="skipped - Only supported for providers [gce]"></skipped></testcase>
`), focus)
	if err != nil {
		t.Fatal(err)
	}
	kdefer, err := readRun("kdefer", report(t, `
<testcase name="[It] [sig-apps] Job should run" status="passed"></testcase>
<testcase name="[It] [sig-apps] Job should fail early" status="failed"><failure message="Timed out after 900s.&#xA;pods still there"></failure></testcase>
<testcase name="[It] [sig-apps] CronJob should wait [Slow]" status="skipped"><skipped message="skipped"></skipped></testcase>
<testcase name="[It] [sig-apps] CronJob should need DNS" status="passed"></testcase>
<testcase name="[It] [sig-apps] Job should need a feature" status="skipped"><skipped message="skipped - Only supported for providers [gce]"></skipped></testcase>
`), focus)
	if err != nil {
		t.Fatal(err)
	}
	if ran, passed, failed, skipped, filtered := base.counts(); ran != 3 || passed != 2 || failed != 1 || skipped != 1 || filtered != 1 {
		t.Errorf("baseline counts: ran %d passed %d failed %d skipped %d filtered %d, want 3 2 1 1 1", ran, passed, failed, skipped, filtered)
	}
	var out strings.Builder
	if n := compare(&out, base, kdefer); n != 1 {
		t.Errorf("%d differences, want 1:\n%s", n, out.String())
	}
	for _, want := range []string{
		"DIFFERENCE: [sig-apps] Job should fail early: green in baseline, failed in kdefer: Timed out after 900s.\n",
		"not green in baseline either (failed): [sig-apps] CronJob should need DNS: no DNS\n",
		"baseline        3      2      1        1         1\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// A spec green in the baseline and missing from the other run is a difference too.
	delete(kdefer.specs, "[sig-apps] Job should run")
	if n := compare(&strings.Builder{}, base, kdefer); n != 2 {
		t.Errorf("%d differences with a spec missing, want 2", n)
	}
}

func TestReadRunRefusesOtherSpecs(t *testing.T) {
	_, err := readRun("baseline", report(t, ""), focus)
	if err == nil || !strings.Contains(err.Error(), "no spec matches") {
		t.Errorf("a report without the focused specs: %v", err)
	}
}
