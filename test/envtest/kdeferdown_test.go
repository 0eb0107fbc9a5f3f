package envtest_test

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/test/envtest"
)

// While kdefer is down (its webhook server gone, deploy/webhook's
// configurations in place, failurePolicy Fail), an opted-in Job's UPDATEs
// that change nothing kdefer reads still pass: the garbage collector adding
// and removing a finalizer, a label or another tool's annotation, Kueue
// admitting it (its labels and node selector on the template, then
// un-suspended). A change kdefer must see, to its labels or annotations on
// the Job or its template, waits for kdefer.
func TestJobUpdatesWhileKdeferDown(t *testing.T) {
	env := envtest.Start(t, envtest.WithWebhooks())
	ctx, stop := context.WithCancel(context.Background())
	serveWebhooks(t, ctx, env)
	ns := namespace(t, env, "down")
	job := rt.MakeJob("sim", ns).StageOut("s3://results/{job}/{pod}/").Annotation(v1.AnnotationCredentials, "minio").Obj()
	suspend := true
	job.Spec.Suspend = &suspend // as Kueue creates it
	bg := context.Background()
	if err := env.Client.Create(bg, job); err != nil {
		t.Fatalf("create: %v", err)
	}

	// kdefer goes down.
	stop()
	wio := env.WebhookInstallOptions
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a liveness probe
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("webhook server still up")
		}
	}

	patch := func(p string) error {
		return env.Client.Patch(bg, &batchv1.Job{ObjectMeta: job.ObjectMeta}, client.RawPatch(types.MergePatchType, []byte(p)))
	}
	for _, tc := range []struct{ what, patch string }{
		{"a finalizer added, as the garbage collector's foreground deletion does", `{"metadata":{"finalizers":["e2e.kdefer.io/hold"]}}`},
		{"the finalizer removed", `{"metadata":{"finalizers":null}}`},
		{"a label added", `{"metadata":{"labels":{"team":"physics"}}}`},
		{"another tool's annotation added", `{"metadata":{"annotations":{"example.com/owner":"physics"}}}`},
		{"its template given a label and a node selector, as Kueue admits it", `{"spec":{"template":{"metadata":{"labels":{"kueue.x-k8s.io/podset":"main"}},"spec":{"nodeSelector":{"pool":"batch"}}}}}`},
		{"un-suspended, as Kueue admits it", `{"spec":{"suspend":false}}`},
	} {
		if err := patch(tc.patch); err != nil {
			t.Errorf("%s while kdefer is down: %v", tc.what, err)
		}
	}
	job2 := rt.MakeJob("sim2", ns).StageOut("s3://results/{job}/{pod}/").Obj()
	if err := env.Client.Create(bg, job2); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("an opted-in Job created while kdefer is down: %v, want refused (it would run unrendered)", err)
	}
	for _, tc := range []struct{ what, patch string }{
		{"kdefer's annotation changed", `{"metadata":{"annotations":{"kdefer.io/stage-out":"s3://elsewhere/{pod}/"}}}`},
		{"kdefer's annotation removed", `{"metadata":{"annotations":{"kdefer.io/credentials":null}}}`},
		{"a kdefer annotation of the template changed", `{"spec":{"template":{"metadata":{"annotations":{"kdefer.io/rendered":"forged"}}}}}`},
		{"kdefer's label of the template removed", `{"spec":{"template":{"metadata":{"labels":{"kdefer.io/managed":null}}}}}`},
	} {
		if err := patch(tc.patch); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			t.Errorf("%s while kdefer is down: %v, want refused until kdefer can check it", tc.what, err)
		}
	}
}
