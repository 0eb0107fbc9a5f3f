package main

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// patient wraps the bench's own client so that its writes outlast a
// starved apiserver: on a shared machine a nice'd apiserver can take longer
// than its 60 s request timeout, and one such answer used to end the whole
// run. A write that timed out is tried again; a create that then finds its
// object exists took effect the first time, and the object is read back (the
// bench uses the UIDs it gets).
func patient(c client.WithWatch) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			timedOut := false
			for {
				err := c.Create(ctx, obj, opts...)
				switch {
				case isTimeout(err) && ctx.Err() == nil:
					timedOut = true
					obj.SetResourceVersion("")
				case timedOut && apierrors.IsAlreadyExists(err):
					return c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
				default:
					return err
				}
			}
		},
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			for {
				if err := c.Get(ctx, key, obj, opts...); !isTimeout(err) || ctx.Err() != nil {
					return err
				}
			}
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			for {
				// A retried update that took effect the first time
				// fails as a conflict, which the callers handle.
				if err := c.SubResource(sub).Update(ctx, obj, opts...); !isTimeout(err) || ctx.Err() != nil {
					return err
				}
			}
		},
	})
}

func isTimeout(err error) bool {
	return err != nil && (apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		strings.Contains(err.Error(), "request did not complete within requested timeout"))
}
