// Command report reads what make e2e-upstream produced: Kubernetes' own
// e2e specs run twice on the local cluster (a baseline without kdefer, and
// with kdefer arming every Job), and the bucket the armed pods staged out to.
//
//	report junit --focus REGEX BASELINE.xml KDEFER.xml   # specs per run, and the differences
//	report bucket make ADDR BUCKET                      # the bucket, writable without credentials
//	report bucket count ADDR BUCKET PREFIX              # objects and stage-out manifests under PREFIX
//
// junit exits 1 when a spec green in the baseline is not green with kdefer.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "junit":
		err = junitCmd(os.Args[2:])
	case "bucket":
		err = bucketCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "report %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: report junit --focus REGEX BASELINE.xml KDEFER.xml | report bucket make|count ADDR BUCKET [PREFIX]")
	os.Exit(2)
}
