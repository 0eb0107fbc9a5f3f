package controller

import (
	"context"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expectations remember the resourceVersion of the controller's own last
// write of each object of one kind, so a pass that reads an older copy from
// the cache waits for the watch to catch up instead of acting on stale
// state (and failing a write with a conflict, which under load costs a
// round trip per object). The pattern is the Job controller's and Kueue's.
// A nil store expects nothing (unit tests without a cache).
type expectations struct {
	mu sync.Mutex
	rv map[types.NamespacedName]int64
}

func newExpectations() *expectations {
	return &expectations{rv: map[types.NamespacedName]int64{}}
}

// ownWrites holds one expectations store per kind the reconcilers write
// and then read back from the cache; the pod and run reconcilers share it.
type ownWrites struct {
	runs, pods, claims *expectations
}

func newOwnWrites() ownWrites {
	return ownWrites{runs: newExpectations(), pods: newExpectations(), claims: newExpectations()}
}

// expect records that obj, as just written, has its current resourceVersion.
func (e *expectations) expect(obj client.Object) {
	if e == nil {
		return
	}
	v, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rv[client.ObjectKeyFromObject(obj)] = v
}

// satisfied reports whether a cached copy (nil: not in the cache) of the
// object with key is at least as new as the last write; it forgets the
// expectation once it is.
func (e *expectations) satisfied(key types.NamespacedName, cached client.Object) bool {
	if e == nil {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	want, ok := e.rv[key]
	if !ok {
		return true
	}
	if cached == nil {
		return false
	}
	have, err := strconv.ParseInt(cached.GetResourceVersion(), 10, 64)
	if err != nil || have >= want {
		delete(e.rv, key)
		return true
	}
	return false
}

// forget drops the expectation of the object with key (it was deleted).
func (e *expectations) forget(key types.NamespacedName) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.rv, key)
}

// patch applies mutate to obj and sends the change as a merge patch that
// carries obj's resourceVersion (optimistic lock): a pass that read a stale
// copy fails with a conflict, and quiet turns that into a requeue, instead
// of overwriting a newer write. The only way the reconcilers patch objects
// they read.
func patch[T client.Object](ctx context.Context, c client.Client, obj T, mutate func(T)) error {
	orig := obj.DeepCopyObject().(T)
	mutate(obj)
	return c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}
