package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kdefer/kdefer/test/repo"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	ct "github.com/kdefer/kdefer/controller/testing/clienttest"
	"github.com/kdefer/kdefer/controller/webhook"
	"github.com/kdefer/kdefer/stagecontract"
)

func createManaged(ctx context.Context, c client.Client, writes *ct.WriteCounter, jobUIDs []types.UID, start time.Time) error {
	if err := parallel(*nPods, 32, func(i int) error {
		j := i / *podsPerJob
		p := kt.MakePod(podName(i), ns).OnNode(nodeName(i)).OwnedByJob(fmt.Sprintf("job-%04d", j), jobUIDs[j]).Obj()
		p.UID, p.Status = "", corev1.PodStatus{}
		if *creds {
			p.Annotations[v1.AnnotationCredentials] = benchSecret
		}
		if err := c.Create(ctx, p); err != nil {
			return err
		}
		if err := ct.SetRunning(ctx, c, p); err != nil {
			return err
		}
		return c.Create(ctx, kt.ClaimFor(p, v1.DefaultWorkVolumeName))
	}); err != nil {
		return err
	}
	logf("created in %s; waiting for every pod to be armed", time.Since(start).Round(time.Millisecond))
	var listed time.Time
	if err := waitFor(ctx, 10*time.Minute, func() bool {
		// The webhook arms a pod with one write, the controller with two
		// (the run, then the PVC's second owner).
		if writes.Total("create", "DeferRun") >= *nPods &&
			(*armWebhook || writes.Total("patch", "PersistentVolumeClaim") >= *nPods) {
			return true
		}
		// A webhook call the apiserver gave up on (a loaded machine) may
		// still have created its run, which the manager's client then
		// counted as failed: count the runs themselves now and then.
		if time.Since(listed) < 5*time.Second {
			return false
		}
		listed = time.Now()
		runs := &metav1.PartialObjectMetadataList{}
		runs.SetGroupVersionKind(v1.GroupVersion.WithKind("DeferRunList"))
		return c.List(ctx, runs, client.InNamespace(ns)) == nil && len(runs.Items) >= *nPods &&
			(*armWebhook || writes.Total("patch", "PersistentVolumeClaim") >= *nPods)
	}); err != nil {
		return fmt.Errorf("arming: %w", err)
	}
	logf("armed in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// steadyPhase ends the steady pods at steadyRate a second, then finishes
// their defer pods, and returns their reaction times and the manager's
// writes per run.
func steadyPhase(ctx context.Context, c client.Client, seen *watcher, writes *ct.WriteCounter, steady []int) ([]time.Duration, float64, error) {
	// Steady: steadyRate terminations a second.
	logf("terminating %d pods at %d/s", len(steady), *steadyRate)
	tick := time.NewTicker(time.Second / time.Duration(*steadyRate))
	var wg sync.WaitGroup
	for _, i := range steady {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := terminate(ctx, c, seen, []string{podName(i)}, 1); err != nil {
				logf("terminate %d: %v", i, err)
			}
		}(i)
	}
	tick.Stop()
	wg.Wait()
	steadyNames := names(podName, steady)
	if err := waitFor(ctx, 2*time.Minute, func() bool { return seen.count(steadyNames) == len(steady) }); err != nil {
		return nil, 0, fmt.Errorf("steady: %w", err)
	}
	sl := seen.latencies(steadyNames)
	logf("steady: p50 %s p99 %s", pct(sl, 50), pct(sl, 99))

	// Finish the steady phase's defer pods and count the writes of those
	// runs from creation to release.
	logf("finishing %d defer pods", len(steady))
	if err := parallel(len(steady), 16, func(k int) error {
		name := podName(steady[k]) + "-defer"
		for {
			p := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
				return err
			}
			kt.FinishDeferPod(p, 0, 0, &stagecontract.StageSummary{Op: "out", Bytes: 1 << 20, Objects: 4}, false)
			err := c.Status().Update(ctx, p)
			if err == nil {
				return nil
			}
			if !strings.Contains(err.Error(), "modified") {
				return err
			}
		}
	}); err != nil {
		return nil, 0, err
	}
	if err := waitFor(ctx, 3*time.Minute, func() bool { return released(ctx, c, steady) }); err != nil {
		return nil, 0, fmt.Errorf("release: %w", err)
	}
	time.Sleep(2 * time.Second) // let the Job summaries settle
	return sl, writesPerRun(writes.Writes(), steady), nil
}

// profileAPIServer writes a CPU profile of the kube-apiserver (its
// /debug/pprof, as the envtest admin) over the next secs seconds.
func profileAPIServer(ctx context.Context, cfg *rest.Config, path string, secs int) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	data, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(secs)).Timeout(time.Duration(secs+30) * time.Second).DoRaw(ctx)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// armWebhookConfig is deploy/webhook's MutatingWebhookConfiguration with
// only the work-PVC arming webhook.
func armWebhookConfig() (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	data, err := os.ReadFile(filepath.Join(repo.MustRoot(), "deploy", "webhook", "webhooks.yaml"))
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var mwc admissionregistrationv1.MutatingWebhookConfiguration
		if err := r.Decode(&mwc); err != nil {
			return nil, fmt.Errorf("no MutatingWebhookConfiguration with the arming webhook in deploy/webhook: %w", err)
		}
		if mwc.Kind != "MutatingWebhookConfiguration" {
			continue
		}
		for _, w := range mwc.Webhooks {
			if w.ClientConfig.Service != nil && w.ClientConfig.Service.Path != nil && *w.ClientConfig.Service.Path == webhook.ArmPVCPath {
				mwc.Webhooks = []admissionregistrationv1.MutatingWebhook{w}
				return &mwc, nil
			}
		}
	}
}

func podName(i int) string { return fmt.Sprintf("m-%05d", i) }

// nodeName is the node of pod i (and node i): round robin over -nodes.
func nodeName(i int) string { return fmt.Sprintf("n%d", i%*nNodes+1) }

// names maps pod indexes to pod names.
func names(name func(int) string, idx []int) []string {
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = name(i)
	}
	return out
}

// terminate writes the Succeeded status of the pods, as the kubelet would,
// and notes when each write returned: the start of its reaction time.
func terminate(ctx context.Context, c client.Client, seen *watcher, pods []string, par int) error {
	return parallel(len(pods), par, func(k int) error {
		name := pods[k]
		for {
			p := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
				return err
			}
			kt.Terminate(p, 0, "Completed", corev1.PodSucceeded, "")
			err := c.Status().Update(ctx, p)
			if err == nil {
				seen.ended(name + "-defer")
				return nil
			}
			if !strings.Contains(err.Error(), "modified") {
				return err
			}
		}
	})
}

func released(ctx context.Context, c client.Client, idx []int) bool {
	for _, i := range idx {
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: podName(i)}, p); err != nil {
			return false
		}
		if len(p.Finalizers) > 0 {
			return false
		}
	}
	return true
}

// writesPerRun: the writes on the runs' own objects, plus their share of the
// Job summary writes.
func writesPerRun(all []ct.Write, idx []int) float64 {
	names := map[string]bool{}
	jobs := map[string]int{}
	for _, i := range idx {
		names[podName(i)] = true
		jobs[fmt.Sprintf("job-%04d", i / *podsPerJob)]++
	}
	own, jobWrites := 0, 0
	kinds := map[string]int{}
	for _, w := range all {
		base := strings.TrimSuffix(strings.TrimSuffix(w.Name, "-defer"), "-"+v1.DefaultWorkVolumeName)
		if names[base] {
			own++
		}
		if w.Kind == "Job" && jobs[w.Name] > 0 {
			jobWrites++
		}
		if names[base] || (w.Kind == "Job" && jobs[w.Name] > 0) {
			k := w.Verb + " " + w.Kind
			if w.Subresource != "" {
				k += "/" + w.Subresource
			}
			kinds[k]++
		}
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(n)/float64(len(idx))))
	}
	sort.Strings(parts)
	logf("writes per run: %s", strings.Join(parts, ", "))
	// Job writes are shared with the burst's runs of the same Jobs; charge
	// them all to these runs (an upper bound).
	return float64(own+jobWrites) / float64(len(idx))
}
