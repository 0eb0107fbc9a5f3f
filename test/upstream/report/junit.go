package main

import (
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// spec is one testcase of a Ginkgo JUnit report.
type spec struct {
	Name    string `xml:"name,attr"`
	Status  string `xml:"status,attr"` // passed, failed, skipped, pending, panicked, interrupted, timedout, aborted
	Failure *struct {
		Message string `xml:"message,attr"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
	} `xml:"error"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

// run is one report's specs that the focus selects, by name.
type run struct {
	name  string
	specs map[string]spec
}

// readRun reads a Ginkgo JUnit report (--junit-report): every spec of the
// suite is there, those the filters left out as skipped; only the names
// focus matches count.
func readRun(name, path string, focus *regexp.Regexp) (run, error) {
	f, err := os.Open(path)
	if err != nil {
		return run{}, err
	}
	defer f.Close()
	var doc struct {
		Suites []struct {
			Cases []spec `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.NewDecoder(f).Decode(&doc); err != nil {
		return run{}, fmt.Errorf("read %s: %w", path, err)
	}
	r := run{name: name, specs: map[string]spec{}}
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			c.Name = strings.TrimPrefix(c.Name, "[It] ")
			if focus.MatchString(c.Name) {
				r.specs[c.Name] = c
			}
		}
	}
	if len(r.specs) == 0 {
		return run{}, fmt.Errorf("%s: no spec matches %q: not a report of these specs", path, focus)
	}
	return r, nil
}

// filtered: left out by the run's filters (Ginkgo's bare "skipped"), not
// skipped by the spec itself ("skipped - WHY").
func (s spec) filtered() bool {
	return s.Status == "skipped" && (s.Skipped == nil || s.Skipped.Message == "skipped")
}

// counts: specs run (neither filtered nor skipped), passed, failed, skipped
// (by the spec itself at run time, e.g. a missing cluster feature), and
// filtered out by the run's label filter.
func (r run) counts() (ran, passed, failed, skipped, filtered int) {
	for _, s := range r.specs {
		switch {
		case s.filtered():
			filtered++
		case s.Status == "skipped" || s.Status == "pending":
			skipped++
		case s.Status == "passed":
			ran++
			passed++
		default:
			ran++
			failed++
		}
	}
	return
}

// why is the first line of a spec's failure.
func (s spec) why() string {
	m := ""
	switch {
	case s.Failure != nil:
		m = s.Failure.Message
	case s.Error != nil:
		m = s.Error.Message
	case s.Skipped != nil:
		m = s.Skipped.Message
	}
	m, _, _ = strings.Cut(strings.TrimSpace(m), "\n")
	if len(m) > 200 {
		m = m[:200] + "..."
	}
	return m
}

// compare writes the table of both runs and every spec green in base and
// not in other; it returns how many there are.
func compare(w io.Writer, base, other run) int {
	fmt.Fprintf(w, "%-10s %6s %6s %6s %8s %9s\n", "run", "specs", "passed", "failed", "skipped", "filtered")
	for _, r := range []run{base, other} {
		ran, passed, failed, skipped, filtered := r.counts()
		fmt.Fprintf(w, "%-10s %6d %6d %6d %8d %9d\n", r.name, ran, passed, failed, skipped, filtered)
	}
	names := make([]string, 0, len(base.specs))
	for n := range base.specs {
		names = append(names, n)
	}
	sort.Strings(names)
	diffs := 0
	for _, n := range names {
		b := base.specs[n]
		if b.filtered() {
			continue
		}
		o, ok := other.specs[n]
		switch {
		case b.Status != "passed":
			fmt.Fprintf(w, "not green in %s either (%s): %s: %s\n", base.name, b.Status, n, b.why())
		case !ok:
			diffs++
			fmt.Fprintf(w, "DIFFERENCE: %s: green in %s, not in %s's report\n", n, base.name, other.name)
		case o.Status != "passed":
			diffs++
			fmt.Fprintf(w, "DIFFERENCE: %s: green in %s, %s in %s: %s\n", n, base.name, o.Status, other.name, o.why())
		}
	}
	return diffs
}

func junitCmd(args []string) error {
	fs := flag.NewFlagSet("junit", flag.ContinueOnError)
	focus := fs.String("focus", "", "regular expression: the specs the runs were focused on (their names without Ginkgo's [It] prefix)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 || *focus == "" {
		return errors.New("want --focus REGEX BASELINE.xml KDEFER.xml")
	}
	re, err := regexp.Compile(*focus)
	if err != nil {
		return fmt.Errorf("--focus: %w", err)
	}
	base, err := readRun("baseline", fs.Arg(0), re)
	if err != nil {
		return err
	}
	other, err := readRun("kdefer", fs.Arg(1), re)
	if err != nil {
		return err
	}
	for _, r := range []run{base, other} {
		if ran, _, _, _, _ := r.counts(); ran == 0 {
			return fmt.Errorf("%s: no spec of %q ran", r.name, *focus)
		}
	}
	if n := compare(os.Stdout, base, other); n > 0 {
		return fmt.Errorf("%d spec(s) green without kdefer are not green with it", n)
	}
	return nil
}
