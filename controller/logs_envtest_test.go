package controller_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kdefer/kdefer/controller"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

// The logs endpoint against a real apiserver: the defer pod kdefer makes
// carries a token for the logs audience, the apiserver's TokenReview of a
// token bound to it names the pod, and only that token reads the ended
// pod's logs; the ended pod's own token, and the defer pod's token for the
// apiserver's audience, do not.
func TestLogsEndpointEnvtest(t *testing.T) {
	// Not yet passing: the defer pod is never created in this setup (seen
	// 2026-12-01: "timed out waiting for defer pod created"); the cause is
	// not found yet (issue #17, h17's report).
	t.Skip("the run's defer pod is not created in this setup yet: see h17's report")
	h := newHarness(t)
	ca := "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
	h.deferPod.Logs = controller.LogsEndpoint{URL: "https://kdefer-webhook.kdefer-system.svc" + stagecontract.LogsPath, CA: func() []byte { return []byte(ca) }}
	h.start()
	ctx := context.Background()
	ns := h.namespace("logs")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	must(t, h.c.Create(ctx, sa))
	_, pod := h.managedJobPod(ns, "logs")
	run := h.waitArmed(pod)
	h.updatePodStatus(pod, func(p *corev1.Pod) { kt.Terminate(p, 1, "Error", corev1.PodFailed, "") })
	dp := h.waitDeferPod(run)
	must(t, h.get(run))

	stage := dp.Spec.Containers[0]
	if len(dp.Spec.InitContainers) > 0 {
		stage = dp.Spec.InitContainers[0]
	}
	envOf := func(name string) string {
		for _, e := range stage.Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}
	if envOf(stagecontract.EnvLogsURL) != h.deferPod.Logs.URL || envOf(stagecontract.EnvLogsCA) != ca || envOf(stagecontract.EnvLogsMaxBytes) != "10485760" {
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
	ls := &controller.LogServer{Client: h.c, Reader: h.c, Log: logr.Discard(),
		Logs: func(_ context.Context, ns, name string, o *corev1.PodLogOptions) (io.ReadCloser, error) {
			asked = append(asked, ns+"/"+name+"/"+o.Container)
			return io.NopCloser(strings.NewReader("log of " + o.Container + "\n")), nil
		}}
	get := func(tok, query string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, stagecontract.LogsPath+query, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		ls.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}

	deferTok := token(dp, stagecontract.LogsAudience)
	code, body := get(deferTok, "")
	var idx stagecontract.LogsIndex
	if code != http.StatusOK || json.Unmarshal([]byte(body), &idx) != nil || idx.Pod != pod.Name || len(idx.Logs) == 0 {
		t.Fatalf("index for the defer pod's token: %d %s", code, body)
	}
	main := pod.Spec.Containers[0].Name
	if code, body := get(deferTok, "?container="+main); code != http.StatusOK || body != "log of "+main+"\n" {
		t.Errorf("log for the defer pod's token: %d %q", code, body)
	}
	if code, _ := get(deferTok, "?container=nope"); code != http.StatusNotFound {
		t.Errorf("a container the pod does not have: %d, want 404", code)
	}
	if code, _ := get(token(pod, stagecontract.LogsAudience), ""); code != http.StatusForbidden {
		t.Errorf("the ended pod's own token: %d, want 403", code)
	}
	if code, _ := get(token(dp, "https://kubernetes.default.svc"), ""); code != http.StatusUnauthorized {
		t.Errorf("the defer pod's token for another audience: %d, want 401", code)
	}
	if code, _ := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if len(asked) != 1 || asked[0] != ns+"/"+pod.Name+"/"+main {
		t.Errorf("pods/log asked for %v, want only %s/%s/%s", asked, ns, pod.Name, main)
	}
}
