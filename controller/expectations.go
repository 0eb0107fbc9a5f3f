package controller

import (
	"context"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expectations remember the resourceVersion of the controller's own last
// write of each object of one kind, so a pass that reads an older copy from
// the cache waits for the watch to catch up instead of acting on stale
// state (and failing a write with a conflict, which under load costs a
// round trip per object). The pattern is the Job controller's and Kueue's.
// A nil store expects nothing (unit tests without a cache).
//
// An expectation lasts expectationTTL at most. Most end when the cache
// shows the write, but an object deleted right after the controller's last
// write (a pod whose finalizer kdefer removed, a run deleted by its TTL) is
// never read again: without the bound, every such object would leave an
// entry behind for the life of the process. The bound also keeps a lost
// watch event from holding an object back for longer than the TTL.
type expectations struct {
	mu     sync.Mutex
	rv     map[types.NamespacedName]expectation
	now    func() time.Time
	writes int // expect calls since the last sweep
}

type expectation struct {
	rv int64
	at time.Time
}

// expectationTTL is the Job controller's ExpectationsTimeout: long past any
// healthy watch's lag, short enough that a wedged key recovers.
const expectationTTL = 5 * time.Minute

// sweepEvery is how many writes pass between sweeps of expired entries; it
// keeps the sweep's cost per write constant.
const sweepEvery = 1024

func newExpectations(now func() time.Time) *expectations {
	return &expectations{rv: map[types.NamespacedName]expectation{}, now: now}
}

// ownWrites holds one expectations store per kind the reconcilers write
// and then read back from the cache; the pod and run reconcilers share it.
type ownWrites struct {
	runs, pods, claims *expectations
}

func newOwnWrites(now func() time.Time) ownWrites {
	return ownWrites{runs: newExpectations(now), pods: newExpectations(now), claims: newExpectations(now)}
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
	now := e.now()
	e.rv[client.ObjectKeyFromObject(obj)] = expectation{rv: v, at: now}
	if e.writes++; e.writes >= sweepEvery {
		e.writes = 0
		for k, x := range e.rv {
			if now.Sub(x.at) > expectationTTL {
				delete(e.rv, k)
			}
		}
	}
}

// satisfied reports whether a cached copy (nil: not in the cache) of the
// object with key is at least as new as the last write, or the expectation
// has expired; it forgets the expectation once it is.
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
	if e.now().Sub(want.at) > expectationTTL {
		delete(e.rv, key)
		return true
	}
	if cached == nil {
		return false
	}
	have, err := strconv.ParseInt(cached.GetResourceVersion(), 10, 64)
	if err != nil || have >= want.rv {
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

// len is the number of expectations held (tests).
func (e *expectations) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.rv)
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
