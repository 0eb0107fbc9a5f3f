//go:build kubee2e

// Package e2e is the smallest test main that runs Kubernetes' own end-to-end
// specs of the apps SIG (Job, CronJob, TTLAfterFinished among them) against
// a running cluster. Upstream's test/e2e main imports every SIG's specs (a
// compile of ~4,000 packages); this one imports test/e2e/apps alone and does
// what upstream's e2e_test.go and e2e.go do around it: register the
// framework's flags, check them (AfterReadingAllFlags), count the cluster's
// schedulable nodes before the specs, and run Ginkgo.
//
// It is not built with kdefer's module (the build tag keeps it out of
// `go test ./...`): test/tools/install.sh kube-e2e compiles it inside a copy of
// the release's wrapper module (test/tools/kube/v1.MINOR), so the specs and
// framework are exactly the release's.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"
	imageutils "k8s.io/kubernetes/test/utils/image"

	// The specs.
	_ "k8s.io/kubernetes/test/e2e/apps"
	// What a failed spec dumps (events, pods of its namespace), as upstream's main.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
)

func TestMain(m *testing.M) {
	showVersion := flag.Bool("version", false, "print the Kubernetes release the specs are of")
	// The images the Job, CronJob and TTLAfterFinished specs run, as the
	// image list of KUBE_TEST_REPO_LIST names them: what a registry must
	// serve, from the release itself rather than a copy of its manifest.
	printImages := flag.Bool("print-images", false, "print NAME REF of the images the Job and CronJob specs use, and exit")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Get().GitVersion)
		os.Exit(0)
	}
	if *printImages {
		fmt.Println("busybox", imageutils.GetE2EImage(imageutils.BusyBox))
		fmt.Println("pause", imageutils.GetPauseImageName())
		os.Exit(0)
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown arguments: %v\n", flag.Args())
		os.Exit(2)
	}
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

// Before the specs, once per Ginkgo process: the node count the framework
// reads (upstream's setupSuite, less what needs a cloud provider).
var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "loading the client")
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, framework.NewTimeoutContext().NodeSchedulable))
	return nil
}, func(ctx context.Context, _ []byte) {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "loading the client")
	if framework.TestContext.CloudConfig.NumNodes == framework.DefaultNumNodes {
		nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
		framework.ExpectNoError(err)
		framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
	}
	framework.TestContext.IPFamily = "ipv4"
})

func TestE2E(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Kubernetes e2e suite (apps)", suiteConfig, reporterConfig)
}
