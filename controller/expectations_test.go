package controller

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestExpectations(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	e := newExpectations(func() time.Time { return now })
	obj := func(name, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

	e.expect(obj("a", "10"))
	if e.satisfied(key("a"), obj("a", "9")) || e.satisfied(key("a"), nil) {
		t.Fatal("an older cached copy, or none, satisfies the expectation of rv 10")
	}
	if !e.satisfied(key("a"), obj("a", "10")) || e.len() != 0 {
		t.Fatalf("the cached write satisfies and forgets the expectation (%d left)", e.len())
	}

	// An object deleted right after kdefer's write is never read again; a
	// watch that lost the event never shows the write. Neither may hold an
	// entry (or the object) forever.
	e.expect(obj("deleted", "20"))
	e.expect(obj("lagging", "30"))
	now = now.Add(6 * time.Minute) // past the Job controller's 5-minute ExpectationsTimeout
	if !e.satisfied(key("lagging"), obj("lagging", "29")) {
		t.Fatal("an expectation older than the TTL still holds the object back")
	}
	for i := range sweepEvery {
		e.expect(obj(fmt.Sprintf("p%d", i), "40"))
	}
	if got := e.len(); got > sweepEvery {
		t.Fatalf("%d expectations held after a sweep: the deleted object's expired entry leaked", got)
	}
	if _, ok := e.rv[key("deleted")]; ok {
		t.Fatal("the deleted object's expired expectation survived the sweep")
	}
}
