package logsendpoint

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kdefer/kdefer/api/scheme"
	"github.com/kdefer/kdefer/stagecontract"
)

// A refused token is remembered for refusedTokenTTL: a pod sending the
// same bad token again and again costs the apiserver one TokenReview per
// that time, not one per request.
func TestRefusedTokenCached(t *testing.T) {
	reviews := 0
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			if tr, ok := obj.(*authnv1.TokenReview); ok {
				reviews++
				tr.Status = authnv1.TokenReviewStatus{Authenticated: false, Error: "invalid bearer token"}
			}
			return nil
		},
	}).Build()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
	s := &Server{Client: c, Reader: c, Log: logr.Discard(), Clock: clk}
	get := func() int {
		req := httptest.NewRequest(http.MethodGet, stagecontract.LogsPath, nil)
		req.Header.Set("Authorization", "Bearer forged")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w.Code
	}
	for range 5 {
		if code := get(); code != http.StatusUnauthorized {
			t.Fatalf("answer %d, want 401", code)
		}
	}
	if reviews != 1 {
		t.Errorf("%d TokenReviews for 5 requests with one refused token, want 1", reviews)
	}
	clk.SetTime(clk.Now().Add(refusedTokenTTL + time.Second))
	get()
	if reviews != 2 {
		t.Errorf("%d TokenReviews after the refusal expired, want 2", reviews)
	}
}

// One source asking far more than a stage step does is refused with 429
// before its requests cost the apiserver anything; another source is not.
func TestRequestsPerSourceBounded(t *testing.T) {
	reviews := 0
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			reviews++
			return nil
		},
	}).Build()
	s := &Server{Client: c, Reader: c, Log: logr.Discard()}
	get := func(from string, i int) int {
		req := httptest.NewRequest(http.MethodGet, stagecontract.LogsPath, nil)
		req.RemoteAddr = from + ":40000"
		req.Header.Set("Authorization", fmt.Sprintf("Bearer random-%d", i))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w.Code
	}
	limited := 0
	for i := range 3 * sourceBurst {
		if get("10.0.0.7", i) == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited == 0 || reviews > 2*sourceBurst {
		t.Errorf("%d of %d requests from one source limited, %d TokenReviews", limited, 3*sourceBurst, reviews)
	}
	if code := get("10.0.0.8", 0); code == http.StatusTooManyRequests {
		t.Errorf("another source limited too")
	}
}
