package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// serviceAccountRetry is how often a run whose policy names a missing
// ServiceAccount tries to create its defer pod again.
const serviceAccountRetry = 10 * time.Second

// serviceAccountMissing says whether a defer pod's creation was refused
// because its ServiceAccount does not exist: the ServiceAccount admission
// plugin's "error looking up service account NS/NAME: serviceaccount
// \"NAME\" not found".
func serviceAccountMissing(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "error looking up service account")
}

// waitForServiceAccount handles a defer pod refused for its missing
// ServiceAccount (the policy's spec.serviceAccountName, which admission
// cannot require to exist: it may be created after the policy): the run
// says so in a ConfigError and tries again, until its deadline, when it
// fails with that problem.
func (r *RunReconciler) waitForServiceAccount(ctx context.Context, s *runState, sa string) (passEnd, error) {
	run := s.view()
	problem := fmt.Sprintf("ServiceAccount %s/%s, the policy's serviceAccountName, does not exist: create it (kubectl -n %s create serviceaccount %s), or fix spec.serviceAccountName; the run waits for it until its deadline",
		run.Namespace, sa, run.Namespace, sa)
	deadline := attemptStart(s.status).Add(runDeadline(run, r.opts))
	if !s.now.Before(deadline) {
		return endWrite, r.finish(ctx, s, v1.DeferRunFailed, v1.ReasonConfigError, problem+" (deadline passed; the work volume is kept per policy)", nil)
	}
	configError(s, v1.ReasonServiceAccountNotFound, problem)
	next := s.now.Add(serviceAccountRetry)
	if deadline.Before(next) {
		next = deadline
	}
	s.requeueAt(next)
	return endWrite, nil
}
