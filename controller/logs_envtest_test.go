package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller"
	"github.com/kdefer/kdefer/controller/logsendpoint"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

// The logs endpoint against a real apiserver: a run, its ended pod and the
// defer pod kdefer builds for it (stored as kdefer and the kubelet would
// leave them: envtest runs no kubelet, so the test makes them itself); the
// apiserver's TokenReview of a token bound to the defer pod names it, and
// only that token reads the ended pod's logs, and with steps=true the
// defer pod's own defer containers'; the ended pod's own token, a tenant
// pod's and the defer pod's token for the apiserver's audience do not.
func TestLogsEndpointEnvtest(t *testing.T) {
	t.Parallel() // see newHarness
	h := newHarness(t)
	ctx := context.Background()
	ns := h.namespace("logs")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	must(t, h.c.Create(ctx, sa))

	// The ended pod: its main container failed once, was restarted in
	// place (restartPolicy OnFailure), then failed for good.
	ended := kt.MakePod("job-x", ns).OnNode(node).Obj()
	ended.UID, ended.Status = "", corev1.PodStatus{}
	ended.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	// What the ServiceAccount admission plugin (off in envtest) sets: a
	// token can only be bound to a pod of its own service account.
	ended.Spec.ServiceAccountName = sa.Name
	must(t, h.c.Create(ctx, ended))
	h.updatePodStatus(ended, func(p *corev1.Pod) {
		kt.Running(p)
		kt.Terminate(p, 1, "Error", corev1.PodFailed, "")
		p.Status.ContainerStatuses[0].RestartCount = 1
	})
	must(t, h.get(ended))

	// Its run, triggered, with defer containers: as kdefer records it.
	run := kt.MakeRun(ended.Name, ns).Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
		p.DeferContainers = []corev1.Container{{Name: "notify", Image: "busybox"}, {Name: "last", Image: "busybox"}}
	}).Obj()
	run.UID, run.Spec.PodUID = "", ended.UID
	status := run.Status
	must(t, h.c.Create(ctx, run))
	status.NodeName, status.TriggeredAt = node, &metav1.Time{Time: time.Now().Add(-time.Second)}
	run.Status = status
	must(t, h.c.Status().Update(ctx, run))

	// Its defer pod, as kdefer builds it.
	ca := "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
	opts := controller.DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:test",
		Logs: controller.LogsEndpoint{URL: "https://kdefer-webhook.kdefer-system.svc" + stagecontract.LogsPath, CA: func() []byte { return []byte(ca) }}}
	dp := controller.BuildDeferPod(run, opts)
	must(t, h.c.Create(ctx, dp))

	stage := dp.Spec.InitContainers[0]
	envOf := func(name string) string {
		for _, e := range stage.Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}
	if stage.Name != v1.StageOutStepName || envOf(stagecontract.EnvLogsURL) != opts.Logs.URL || envOf(stagecontract.EnvLogsCA) != ca || envOf(stagecontract.EnvLogsMaxBytes) != "10485760" {
		t.Errorf("stage step environment lacks the logs endpoint: %+v", stage.Env)
	}
	var aud string
	for _, v := range dp.Spec.Volumes {
		if v.Projected != nil && len(v.Projected.Sources) == 1 && v.Projected.Sources[0].ServiceAccountToken != nil {
			aud = v.Projected.Sources[0].ServiceAccountToken.Audience
		}
	}
	if aud != stagecontract.LogsAudience {
		t.Errorf("defer pod volumes %+v: no token for audience %s", dp.Spec.Volumes, stagecontract.LogsAudience)
	}

	token := func(p *corev1.Pod, audience string) string {
		t.Helper()
		tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience},
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}
		must(t, h.c.SubResource("token").Create(ctx, sa, tr))
		return tr.Status.Token
	}
	var asked []string
	var logErr error // what pods/log answers, as the apiserver relays the kubelet's
	ls := &logsendpoint.Server{Client: h.c, Reader: h.c, Log: logr.Discard(), Source: logsendpoint.APISource{
		Logs: func(_ context.Context, ns, name string, o *corev1.PodLogOptions) (io.ReadCloser, error) {
			asked = append(asked, fmt.Sprintf("%s/%s/%s/%v", ns, name, o.Container, o.Previous))
			if logErr != nil {
				return nil, logErr
			}
			return io.NopCloser(strings.NewReader("log of " + o.Container + "\n")), nil
		}}}
	get := func(tok, query string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, stagecontract.LogsPath+query, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		ls.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	index := func(tok, query string) stagecontract.LogsIndex {
		t.Helper()
		code, body := get(tok, query)
		var idx stagecontract.LogsIndex
		if code != http.StatusOK || json.Unmarshal([]byte(body), &idx) != nil {
			t.Fatalf("index %q for the defer pod's token: %d %s", query, code, body)
		}
		return idx
	}

	deferTok := token(dp, stagecontract.LogsAudience)
	// The ended pod's logs: its container, and the attempt before.
	if idx := index(deferTok, ""); idx.Pod != ended.Name || fmt.Sprint(idx.Logs) != fmt.Sprint([]stagecontract.LogRef{{Container: "main"}, {Container: "main", Previous: true}}) {
		t.Errorf("ended pod's index %+v", idx)
	}
	if code, body := get(deferTok, "?container=main"); code != http.StatusOK || body != "log of main\n" {
		t.Errorf("log for the defer pod's token: %d %q", code, body)
	}
	if code, _ := get(deferTok, "?container=nope"); code != http.StatusNotFound {
		t.Errorf("a container the pod does not have: %d, want 404", code)
	}
	// The defer pod's own defer containers' logs, for its stage-logs sidecar.
	if idx := index(deferTok, "?steps=true"); idx.Pod != dp.Name || fmt.Sprint(idx.Logs) != fmt.Sprint([]stagecontract.LogRef{{Container: "notify"}, {Container: "last"}}) {
		t.Errorf("defer pod's steps index %+v", idx)
	}
	if code, body := get(deferTok, "?steps=true&container=last"); code != http.StatusOK || body != "log of last\n" {
		t.Errorf("defer container's log: %d %q", code, body)
	}
	if code, _ := get(deferTok, "?steps=true&container="+v1.StageOutStepName); code != http.StatusNotFound {
		t.Errorf("the stage step's log through steps=true: %d, want 404 (it archives its own)", code)
	}
	// A log the kubelet no longer has (pods/log answers 400): 404, and for
	// a kubelet-evicted pod 410 saying so.
	logErr = apierrors.NewBadRequest("unable to retrieve container logs for containerd://abc")
	if code, body := get(deferTok, "?container=main&previous=true"); code != http.StatusNotFound || !strings.Contains(body, "unable to retrieve") {
		t.Errorf("a log the kubelet lost: %d %q, want 404 with its answer", code, body)
	}
	h.updatePodStatus(ended, func(p *corev1.Pod) { p.Status.Reason = "Evicted" })
	if code, body := get(deferTok, "?container=main"); code != http.StatusGone || !strings.Contains(body, "evicted by the kubelet") {
		t.Errorf("an evicted pod's log: %d %q, want 410 saying the kubelet removed it", code, body)
	}
	logErr = nil

	// Nobody else: the ended pod's own token, a tenant's pod named like
	// nothing kdefer made, the defer pod's token for the apiserver, none.
	before := len(asked)
	if code, _ := get(token(ended, stagecontract.LogsAudience), ""); code != http.StatusForbidden {
		t.Errorf("the ended pod's own token: %d, want 403", code)
	}
	tenant := kt.MakePod("tenant", ns).OnNode(node).NoFinalizer().Obj()
	tenant.UID, tenant.Status = "", corev1.PodStatus{}
	tenant.Annotations = map[string]string{v1.AnnotationDeferRunName: run.Name} // claims the run
	tenant.Spec.ServiceAccountName = sa.Name
	must(t, h.c.Create(ctx, tenant))
	for _, q := range []string{"", "?container=main", "?steps=true"} {
		if code, _ := get(token(tenant, stagecontract.LogsAudience), q); code != http.StatusForbidden {
			t.Errorf("a tenant pod claiming the run, %q: %d, want 403", q, code)
		}
	}
	if code, _ := get(token(dp, "https://kubernetes.default.svc"), ""); code != http.StatusUnauthorized {
		t.Errorf("the defer pod's token for another audience: %d, want 401", code)
	}
	if code, _ := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if len(asked) != before {
		t.Errorf("pods/log asked for %v by refused requests", asked[before:])
	}
	// A deleted defer pod's token no longer reads anything.
	must(t, h.c.Delete(ctx, dp, client.GracePeriodSeconds(0)))
	if code, _ := get(deferTok, ""); code != http.StatusForbidden {
		t.Errorf("the deleted defer pod's token: %d, want 403", code)
	}
}
