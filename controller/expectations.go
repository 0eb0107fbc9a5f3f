package controller

import (
	"strconv"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expectations remember the resourceVersion of the controller's own last
// write of an object, so a pass that reads an older copy from the cache
// waits for the watch to catch up instead of acting on stale state (and
// failing a write with a conflict, which under load costs a round trip per
// object). The pattern is the Job controller's and Kueue's.
type expectations struct {
	mu sync.Mutex
	rv map[string]int64
}

func newExpectations() *expectations { return &expectations{rv: map[string]int64{}} }

func expKey(kind string, obj client.Object) string {
	return kind + "/" + obj.GetNamespace() + "/" + obj.GetName()
}

// expect records that obj, as just written, has its current resourceVersion.
func (e *expectations) expect(kind string, obj client.Object) {
	if e == nil {
		return
	}
	v, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rv[expKey(kind, obj)] = v
}

// satisfied reports whether a cached copy (nil: not in the cache) is at
// least as new as the last write; it forgets the expectation once it is.
func (e *expectations) satisfied(kind string, key client.Object, cached client.Object) bool {
	if e == nil {
		return true
	}
	k := expKey(kind, key)
	e.mu.Lock()
	defer e.mu.Unlock()
	want, ok := e.rv[k]
	if !ok {
		return true
	}
	if cached == nil {
		return false
	}
	have, err := strconv.ParseInt(cached.GetResourceVersion(), 10, 64)
	if err != nil || have >= want {
		delete(e.rv, k)
		return true
	}
	return false
}

// forget drops an expectation (the object was deleted).
func (e *expectations) forget(kind string, obj client.Object) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.rv, expKey(kind, obj))
}
