package clienttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// ErrCrashed is returned for every write after a simulated crash.
var ErrCrashed = errors.New("simulated controller crash")

// Write is one successful API write a controller made.
type Write struct {
	Verb, Kind, Namespace, Name, Subresource string
}

func (w Write) String() string {
	s := fmt.Sprintf("%s %s %s/%s", w.Verb, w.Kind, w.Namespace, w.Name)
	if w.Subresource != "" {
		s += "/" + w.Subresource
	}
	return s
}

// WriteCounter records the API writes of the clients it makes, and can
// simulate a crash right after the n-th write: it calls the crash function
// (which stops the manager) and fails every later write.
type WriteCounter struct {
	// Keep, if set, limits the writes remembered (Writes) to those it
	// accepts; Total counts every one (benchmarks keep memory flat).
	Keep func(Write) bool

	mu       sync.Mutex
	totals   map[string]int
	writes   []Write
	crashAt  int
	crashed  bool
	onCrash  func()
	observed int
}

// Writes returns the successful writes so far.
func (c *WriteCounter) Writes() []Write {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Write(nil), c.writes...)
}

// Total returns how many writes of that verb and kind (with subresource
// "kind/sub", e.g. "DeferRun/status") succeeded.
func (c *WriteCounter) Total(verb, kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !strings.Contains(kind, "/") {
		kind += "/"
	}
	return c.totals[verb+" "+kind]
}

// Reset forgets the writes and any crash.
func (c *WriteCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes, c.totals, c.crashAt, c.crashed, c.onCrash, c.observed = nil, nil, 0, false, nil, 0
}

// CrashAfter makes the n-th write from now on the last: f is called after it
// succeeds and every later write fails until Reset or Recover.
func (c *WriteCounter) CrashAfter(n int, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashAt, c.onCrash, c.observed, c.crashed = n, f, 0, false
}

// Crashed reports whether the simulated crash happened.
func (c *WriteCounter) Crashed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed
}

// Recover lets writes through again (a restarted controller).
func (c *WriteCounter) Recover() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashed, c.crashAt, c.onCrash = false, 0, nil
}

// Count returns how many writes match f.
func (c *WriteCounter) Count(f func(Write) bool) int {
	n := 0
	for _, w := range c.Writes() {
		if f(w) {
			n++
		}
	}
	return n
}

func (c *WriteCounter) before() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return ErrCrashed
	}
	return nil
}

func (c *WriteCounter) after(w Write, err error) error {
	if err != nil {
		return err
	}
	c.mu.Lock()
	// A write in flight when the crash came still happened on the server:
	// record it, but the crashed caller does not learn of it.
	if c.Keep == nil || c.Keep(w) {
		c.writes = append(c.writes, w)
	}
	if c.totals == nil {
		c.totals = map[string]int{}
	}
	c.totals[w.Verb+" "+w.Kind+"/"+w.Subresource]++
	if c.crashed {
		c.mu.Unlock()
		return ErrCrashed
	}
	c.observed++
	var crash func()
	if c.crashAt > 0 && c.observed == c.crashAt {
		c.crashed, crash = true, c.onCrash
	}
	c.mu.Unlock()
	if crash != nil {
		crash()
	}
	return nil
}

func kindOf(s *runtime.Scheme, obj runtime.Object) string {
	gvk, err := apiutil.GVKForObject(obj, s)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	return gvk.Kind
}

// NewClient is a client.NewClientFunc for manager.Options.NewClient.
func (c *WriteCounter) NewClient(cfg *rest.Config, opts client.Options) (client.Client, error) {
	base, err := client.NewWithWatch(cfg, opts)
	if err != nil {
		return nil, err
	}
	return c.Wrap(base, opts.Scheme), nil
}

// Wrap counts the writes of an existing client (e.g. a fake one).
func (c *WriteCounter) Wrap(base client.WithWatch, s *runtime.Scheme) client.WithWatch {
	rec := func(verb string, obj client.Object, sub string) Write {
		return Write{Verb: verb, Kind: kindOf(s, obj), Namespace: obj.GetNamespace(), Name: obj.GetName(), Subresource: sub}
	}
	return interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.before(); err != nil {
				return err
			}
			return c.after(rec("create", obj, ""), cl.Create(ctx, obj, opts...))
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := c.before(); err != nil {
				return err
			}
			return c.after(rec("update", obj, ""), cl.Update(ctx, obj, opts...))
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := c.before(); err != nil {
				return err
			}
			return c.after(rec("patch", obj, ""), cl.Patch(ctx, obj, p, opts...))
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := c.before(); err != nil {
				return err
			}
			return c.after(rec("delete", obj, ""), cl.Delete(ctx, obj, opts...))
		},
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := c.before(); err != nil {
				return err
			}
			return c.after(rec("update", obj, sub), cl.SubResource(sub).Update(ctx, obj, opts...))
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := c.before(); err != nil {
				return err
			}
			return c.after(rec("patch", obj, sub), cl.SubResource(sub).Patch(ctx, obj, p, opts...))
		},
	})
}
