//go:build e2e

package e2e

import (
	"context"
	"sync"
	"testing"
)

// outage is one stop and one start of kdefer shared by cases that run side
// by side (each stop and start costs the tier seconds, and the cases only
// need kdefer to be down at the same time): kdefer stops once every case is
// ready for it, and starts again once every case has done what it does
// while kdefer is down. A case that ends early (it failed) passes the points
// it did not reach, so the others never wait for it.
type outage struct {
	mu      sync.Mutex
	left    [2]int           // cases not yet at each point: 0 stop, 1 start
	reached [2]chan struct{} // closed once kdefer has stopped, then started
}

// newOutage is an outage for cases cases; the parent test starts kdefer
// again when it ends, whatever happened.
func newOutage(t *testing.T, cases int) *outage {
	t.Cleanup(func() { startKdefer(context.Background(), t) })
	return &outage{left: [2]int{cases, cases}, reached: [2]chan struct{}{make(chan struct{}), make(chan struct{})}}
}

// outageCase is one case's place in the outage.
type outageCase struct {
	o    *outage
	s    *scenario
	next int // the next point this case reaches
}

// join enrols the scenario's case.
func (o *outage) join(s *scenario) *outageCase {
	c := &outageCase{o: o, s: s}
	s.t.Cleanup(func() {
		for c.next < len(o.left) {
			c.pass()
		}
	})
	return c
}

// pass counts the case at its next point without waiting there; the last
// case to arrive stops or starts kdefer.
func (c *outageCase) pass() {
	i := c.next
	c.next++
	c.o.mu.Lock()
	c.o.left[i]--
	last := c.o.left[i] == 0
	c.o.mu.Unlock()
	if !last {
		return
	}
	defer close(c.o.reached[i])
	if i == 0 {
		stopKdefer(c.s)
		return
	}
	c.s.startKdefer()
}

// down returns once kdefer is down for every case.
func (c *outageCase) down() {
	c.s.t.Helper()
	c.wait(0)
}

// up returns once kdefer runs again (every case has done its part).
func (c *outageCase) up() {
	c.s.t.Helper()
	c.wait(1)
}

func (c *outageCase) wait(point int) {
	c.s.t.Helper()
	if c.next != point {
		c.s.t.Fatalf("outage: at point %d, want %d", c.next, point)
	}
	c.pass()
	select {
	case <-c.o.reached[point]:
	case <-c.s.ctx.Done():
		c.s.t.Fatalf("outage: waiting for the other cases: %v", c.s.ctx.Err())
	}
}
