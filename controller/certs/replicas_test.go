package certs

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestReplicasShareOneCertificate: two replicas that start together, before
// any Secret exists, both read the Secret, find none and create one; the
// apiserver keeps the first, and the other must adopt it, not serve a
// certificate of its own: the Service sends each webhook call to either
// replica, and the webhook configurations trust one CA bundle.
func TestReplicasShareOneCertificate(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	// Both first reads of the Secret return only once both were made, so
	// both replicas see it missing.
	var reads sync.WaitGroup
	reads.Add(2)
	var mu sync.Mutex
	first := 0
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			err := c.Get(ctx, key, obj, opts...)
			if _, ok := obj.(*corev1.Secret); ok {
				mu.Lock()
				wait := first < 2
				first++
				mu.Unlock()
				if wait {
					reads.Done()
					reads.Wait()
				}
			}
			return err
		},
	}).Build()

	dirs := []string{t.TempDir(), t.TempDir()}
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, dir := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = New(c, Options{CertDir: dir}, logr.Discard()).Ensure(context.Background())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	sec := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-webhook-cert"}, sec); err != nil {
		t.Fatal(err)
	}
	for i, dir := range dirs {
		for _, k := range []string{CertKey, PrivKeyKey} {
			if string(mustRead(t, filepath.Join(dir, k))) != string(sec.Data[k]) {
				t.Errorf("replica %d serves a %s that is not the Secret's", i, k)
			}
		}
	}
}
