package controller

import (
	"sync"
	"time"
)

// bookkeepingDelay separates a defer pod's creation from the status write
// that records it (trigger, StagingOut), so that in a burst the apiserver
// serves the creations first, and a defer pod done by then (a small
// stage-out) needs only its final status: one write less. The namespace's
// PodDisruptionBudget is made with the first defer pod, not here, so the
// delay leaves no defer pod unprotected.
const bookkeepingDelay = 5 * time.Second

// While defer pods are being created faster than burstRate a second, the
// bookkeeping waits on, in steps of burstRetry, up to maxBookkeepingDelay
// after the defer pod's creation: the status writes of a burst's first
// defer pods would otherwise compete with the creations of its last ones
// (a 1,000-pod burst takes the apiserver of a 2-core machine 4-7 s).
const (
	burstRate           = 100
	burstRetry          = time.Second
	maxBookkeepingDelay = 30 * time.Second
)

// bookkeepingAt says when the bookkeeping of a defer pod created at created
// is due, seen at now: zero when it is due now.
func bookkeepingAt(created, now time.Time, burst bool) time.Time {
	if due := created.Add(bookkeepingDelay); now.Before(due) {
		return due
	}
	if burst && now.Before(created.Add(maxBookkeepingDelay)) {
		return now.Add(burstRetry)
	}
	return time.Time{}
}

// creationRate counts defer pod creations over the last two seconds.
type creationRate struct {
	mu        sync.Mutex
	sec       int64 // the current second (Unix)
	cur, prev int
}

func (c *creationRate) roll(now time.Time) {
	s := now.Unix()
	switch s {
	case c.sec:
	case c.sec + 1:
		c.sec, c.prev, c.cur = s, c.cur, 0
	default:
		c.sec, c.prev, c.cur = s, 0, 0
	}
}

// add records a creation.
func (c *creationRate) add(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	c.cur++
}

// burst says whether more than burstRate defer pods were created in the
// current or the previous second.
func (c *creationRate) burst(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	return c.cur > burstRate || c.prev > burstRate
}
