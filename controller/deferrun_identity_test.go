package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
)

// A defer pod the apiserver refuses for its missing ServiceAccount (the
// ServiceAccount admission plugin's words) makes the run say so, naming
// the ServiceAccount and the fix, and try again: once the ServiceAccount
// exists the defer pod is created and the problem resolved; if it never
// does, the run fails at its deadline with the same problem.
func TestServiceAccountMissing(t *testing.T) {
	for _, created := range []bool{true, false} {
		t.Run(fmt.Sprintf("created=%v", created), func(t *testing.T) {
			missing := true
			job, pod, pvc, n := worldObjects()
			w := newFakeWorldWith(t, interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if p, ok := obj.(*corev1.Pod); ok && p.Name == "j-x-defer" && missing {
						return apierrors.NewForbidden(corev1.Resource("pods"), p.Name,
							fmt.Errorf(`error looking up service account ns/default: serviceaccount "default" not found`))
					}
					return c.Create(ctx, obj, opts...)
				},
			}, job, pod, pvc, n)
			w.settle()
			w.status(pod, func() { pod.Status = kt.MakePod("j-x", "ns").Failed().Obj().Status })
			w.settle()
			run := w.getRun()
			c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunConfigError)
			if c == nil || c.Status != "True" || c.Reason != v1.ReasonServiceAccountNotFound ||
				!strings.Contains(c.Message, "ServiceAccount ns/default") || !strings.Contains(c.Message, "kubectl -n ns create serviceaccount default") {
				t.Fatalf("ConfigError %+v: want %s naming ns/default and the fix", c, v1.ReasonServiceAccountNotFound)
			}
			if created {
				missing = false
				w.clock.Step(serviceAccountRetry)
				w.settle()
				if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "j-x-defer"}, &corev1.Pod{}); err != nil {
					t.Fatalf("no defer pod once the ServiceAccount exists: %v", err)
				}
				if err := w.c.Get(context.Background(), w.key, run); err != nil {
					t.Fatal(err)
				}
				if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunConfigError); c == nil || c.Status != "False" {
					t.Errorf("ConfigError %+v, want resolved", c)
				}
				return
			}
			w.clock.Step(v1.DefaultDeadline)
			w.settle()
			if err := w.c.Get(context.Background(), w.key, run); err != nil {
				t.Fatal(err)
			}
			if c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed); c == nil || c.Reason != v1.ReasonConfigError ||
				!strings.Contains(c.Message, "ServiceAccount ns/default") {
				t.Errorf("Failed %+v: want ConfigError naming the ServiceAccount at the deadline", c)
			}
		})
	}
}
