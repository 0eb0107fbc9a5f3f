package controller

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// errRequeue asks for another pass without logging an error (the cache is
// behind a write this controller made).
var errRequeue = errors.New("requeue")

// quiet turns conflicts and errRequeue into a quiet requeue: they mean the
// cache was behind, which the next pass fixes.
func quiet(ctx context.Context, res reconcile.Result, err error) (reconcile.Result, error) {
	if err == nil {
		return res, nil
	}
	if errors.Is(err, errRequeue) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		log.FromContext(ctx).V(1).Info("requeueing after a stale read", "reason", err.Error())
		return reconcile.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}
	return res, err
}
