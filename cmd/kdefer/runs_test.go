package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	rt "github.com/kdefer/kdefer/render/testing"
)

func runIn(name, state string) *v1.DeferRun {
	r := kt.MakeRun(name, "ns").Job("j").Trigger(v1.TriggerSucceeded, 0).Obj()
	r.Labels[v1.LabelJobName] = "j"
	r.Status.State = state
	if state != "" {
		r.Status.Conditions = []metav1.Condition{{Type: state, Status: metav1.ConditionTrue, Reason: "R", Message: "m", LastTransitionTime: metav1.Now()}}
	}
	return r
}

func finishedJob() *batchv1.Job {
	j := rt.MakeJob("j", "ns").UID("uid-j").Obj()
	j.Annotations = map[string]string{v1.AnnotationSummary: "1/2 staged out, 1 failed"}
	j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	return j
}

func fakeClient(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()
}

func TestWaitRuns(t *testing.T) {
	cases := map[string]struct {
		objs     []client.Object
		ref      string
		wantCode int
	}{
		"all succeeded":         {[]client.Object{finishedJob(), runIn("a", v1.DeferRunSucceeded), runIn("b", v1.DeferRunSkipped)}, "job/j", 0},
		"one failed":            {[]client.Object{finishedJob(), runIn("a", v1.DeferRunSucceeded), runIn("b", v1.DeferRunFailed)}, "job/j", 1},
		"a run still going":     {[]client.Object{finishedJob(), runIn("a", v1.DeferRunStagingOut)}, "job/j", 3},
		"job still running":     {[]client.Object{rt.MakeJob("j", "ns").UID("uid-j").Obj(), runIn("a", v1.DeferRunSucceeded)}, "job/j", 3},
		"job gone, runs final":  {[]client.Object{runIn("a", v1.DeferRunSucceeded)}, "job/j", 0},
		"nothing":               {nil, "job/j", 1},
		"one run, by pod name":  {[]client.Object{runIn("a", v1.DeferRunFailed)}, "pod/a", 1},
		"one run, by run, done": {[]client.Object{runIn("a", v1.DeferRunSucceeded)}, "deferrun/a", 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			kind, n, err := parseRef(tc.ref, "job", "job", "pod", "deferrun")
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err = waitRuns(context.Background(), &out, &outputFlags{}, fakeClient(tc.objs...), "ns", kind, n, 30*time.Millisecond, 10*time.Millisecond)
			code := exitCodeOf(t, err)
			if code != tc.wantCode {
				t.Errorf("exit code %d (%v), want %d; output:\n%s", code, err, tc.wantCode, out.String())
			}
		})
	}
}

func TestStatusOutput(t *testing.T) {
	c := fakeClient(finishedJob(), runIn("a", v1.DeferRunSucceeded), runIn("b", v1.DeferRunFailed))
	runs, job, err := findRuns(context.Background(), c, "ns", "job", "j")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printRuns(&out, runs, job, false)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var firstCols []string
	for _, l := range lines[1:] {
		firstCols = append(firstCols, strings.Fields(l)[0])
	}
	if diff := cmp.Diff([]string{"RUN", "a", "b"}, firstCols); diff != "" || lines[0] != "Job ns/j: 1/2 staged out, 1 failed" {
		t.Errorf("status output:\n%s\n(-want +got rows):\n%s", out.String(), diff)
	}
}

func TestSkipAndRelease(t *testing.T) {
	c := fakeClient(kt.MakePod("p", "ns").Obj(), runIn("a", v1.DeferRunFailed))
	ctx := context.Background()
	if err := annotate(ctx, c, &corev1.Pod{}, "ns", "p", v1.AnnotationSkip); err != nil {
		t.Fatal(err)
	}
	if err := annotate(ctx, c, &v1.DeferRun{}, "ns", "a", v1.AnnotationRelease); err != nil {
		t.Fatal(err)
	}
	p, r := &corev1.Pod{}, &v1.DeferRun{}
	_ = c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "p"}, p)
	_ = c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a"}, r)
	if p.Annotations[v1.AnnotationSkip] != "true" || r.Annotations[v1.AnnotationRelease] != "true" {
		t.Errorf("annotations: pod %v run %v", p.Annotations, r.Annotations)
	}
	var ee *exitError
	if err := annotate(ctx, c, &corev1.Pod{}, "ns", "missing", v1.AnnotationSkip); !errors.As(err, &ee) || ee.code != 1 {
		t.Errorf("missing pod: %v", err)
	}
	if _, _, err := parseRef("node/x", "pod", "pod", "job"); !errors.As(err, &ee) || ee.code != 2 {
		t.Errorf("bad kind: %v", err)
	}
}

func TestControllerVersion(t *testing.T) {
	dep := func(name string, labels map[string]string, image string) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kdefer-system", Labels: labels}}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "manager", Image: image}}
		return d
	}
	sel := map[string]string{"app.kubernetes.io/name": "kdefer", "app.kubernetes.io/component": "controller"}
	withVersion := map[string]string{"app.kubernetes.io/version": "v0.3.0"}
	for k, v := range sel {
		withVersion[k] = v
	}
	cases := map[string]struct {
		obj  *appsv1.Deployment
		want string
		code int
	}{
		"image tag":     {dep("kdefer-controller", sel, "registry:5000/kdefer-controller:v0.2.1"), "Controller: v0.2.1 (deployment kdefer-system/kdefer-controller)\n", 0},
		"version label": {dep("kd", withVersion, "x/kdefer-controller@sha256:ab"), "Controller: v0.3.0 (deployment kdefer-system/kd)\n", 0},
		"not installed": {dep("other", map[string]string{"app": "x"}, "x:1"), "", 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := printControllerVersion(context.Background(), &out, fakeClient(tc.obj), "kdefer-system")
			code := 0
			var ee *exitError
			if errors.As(err, &ee) {
				code = ee.code
			}
			if code != tc.code || out.String() != tc.want {
				t.Errorf("exit %d (%v), output %q; want %d, %q", code, err, out.String(), tc.code, tc.want)
			}
		})
	}
}

func TestStatusOutputFormats(t *testing.T) {
	runs := []v1.DeferRun{*runIn("a", v1.DeferRunSucceeded), *runIn("b", v1.DeferRunFailed)}
	cases := map[string]struct {
		format string
		runs   []v1.DeferRun
		want   []string
	}{
		"name":         {"name", runs, []string{"deferrun.kdefer.io/a\n", "deferrun.kdefer.io/b\n"}},
		"yaml, a list": {"yaml", runs, []string{"kind: DeferRunList\n", "name: a\n", "name: b\n"}},
		"json, one":    {"json", runs[:1], []string{`"kind": "DeferRun"`, `"name": "a"`}},
		"wide":         {"wide", runs, []string{"RUN  JOB  POD", "UNSAVED"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var o outputFlags
			o.add(&cobra.Command{})
			*o.print.OutputFormat = tc.format
			var out bytes.Buffer
			var job *batchv1.Job
			if len(tc.runs) > 1 {
				job = finishedJob()
			}
			if err := o.printRuns(&out, tc.runs, job); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("-o %s lacks %q:\n%s", tc.format, w, out.String())
				}
			}
		})
	}
}
