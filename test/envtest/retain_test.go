package envtest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/envtest"
)

const kdeferSA = "system:serviceaccount:kdefer-system:kdefer-controller"

func testRetainPolicy(t *testing.T, env *envtest.Env) {
	ctx := context.Background()
	env.InstallRetainPolicy(t)
	ns := namespace(t, env, "retain")
	// Everyone here may delete PVCs as far as RBAC goes; only the policy stands in the way.
	gc := env.Impersonate(t, "system:serviceaccount:kube-system:generic-garbage-collector", "system:masters")
	alice := env.Impersonate(t, "alice", "system:masters")
	kdefer := env.Impersonate(t, kdeferSA, "system:masters")

	pvc := func(name string, labelled bool, owners ...metav1.OwnerReference) *corev1.PersistentVolumeClaim {
		p := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
		if labelled {
			p.Labels = map[string]string{v1.LabelWorkVolume: "kdefer-work"}
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	podOwner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "sim-abc", UID: "pod-uid", Controller: ptr(true), BlockOwnerDeletion: ptr(true)}
	runOwner := metav1.OwnerReference{APIVersion: v1.GroupVersion.String(), Kind: "DeferRun", Name: "sim-abc", UID: "run-uid"}

	cases := []struct {
		name    string
		labeled bool
		owners  []metav1.OwnerReference
		as      client.Client
		allowed bool
	}{
		{name: "garbage collector, pod-owned only", labeled: true, owners: []metav1.OwnerReference{podOwner}, as: gc},
		{name: "user, pod-owned only", labeled: true, owners: []metav1.OwnerReference{podOwner}, as: alice},
		{name: "user, no owner", labeled: true, as: alice},
		// Retained means retained: once a DeferRun co-owns the volume, it
		// goes only when kdefer releases it (kdefer deletes it itself), so
		// neither a user nor the garbage collector may delete it, whether
		// the run is unfinished or kept the volume after a failure.
		{name: "user, co-owned by a DeferRun", labeled: true, owners: []metav1.OwnerReference{podOwner, runOwner}, as: alice},
		{name: "garbage collector, co-owned by a DeferRun", labeled: true, owners: []metav1.OwnerReference{podOwner, runOwner}, as: gc},
		{name: "user, DeferRun owner only (retained, pod gone)", labeled: true, owners: []metav1.OwnerReference{runOwner}, as: alice},
		{name: "kdefer's ServiceAccount", labeled: true, owners: []metav1.OwnerReference{podOwner}, as: kdefer, allowed: true},
		{name: "kdefer's ServiceAccount releases a retained volume", labeled: true, owners: []metav1.OwnerReference{runOwner}, as: kdefer, allowed: true},
		{name: "not a work volume", owners: []metav1.OwnerReference{podOwner}, as: gc, allowed: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := pvc(fmt.Sprintf("pvc-%d", i), tc.labeled, tc.owners...)
			// Deleted as kdefer's release deletes (foreground, this PVC only); the policy looks only at who asks.
			err := tc.as.Delete(ctx, p, client.Preconditions{UID: &p.UID}, client.PropagationPolicy(metav1.DeletePropagationForeground))
			if tc.allowed {
				if err != nil {
					t.Fatalf("delete refused: %v", err)
				}
				return
			}
			why := "a kdefer-managed pod and kdefer has not taken it over yet"
			release := "kdefer release (once"
			switch {
			case slices.Contains(tc.owners, runOwner):
				why = "kdefer-managed pod sim-abc, kept by DeferRun sim-abc until kdefer releases it (the run is unfinished, or retained the volume)"
				release = "kdefer release -n " + ns + " deferrun/sim-abc (once"
			case len(tc.owners) > 0:
				why = "kdefer-managed pod sim-abc and kdefer has not taken it over yet"
				release = "kdefer release -n " + ns + " deferrun/sim-abc (once"
			}
			wantDenied(t, err, "ValidatingAdmissionPolicy 'kdefer-retain-work-volumes'",
				fmt.Sprintf("PersistentVolumeClaim %s/%s holds the work volume of %s", ns, p.Name, why),
				release, fmt.Sprintf("kubectl label pvc -n %s %s kdefer.io/work-volume- and delete it again", ns, p.Name))
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("status reason %v, want Forbidden", apierrors.ReasonForError(err))
			}
		})
	}

	t.Run("label removed, then deleted on purpose", func(t *testing.T) {
		p := pvc("on-purpose", true, podOwner)
		delete(p.Labels, v1.LabelWorkVolume)
		if err := alice.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := alice.Delete(ctx, p); err != nil {
			t.Fatalf("delete after unlabelling: %v", err)
		}
	})

	t.Run("namespace being deleted", func(t *testing.T) {
		dns := namespace(t, env, "retain-doomed")
		p := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: dns, Labels: map[string]string{v1.LabelWorkVolume: "w"}, OwnerReferences: []metav1.OwnerReference{podOwner, runOwner}},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		wantDenied(t, gc.Delete(ctx, p, client.DryRunAll), "holds the work volume")
		// envtest runs no namespace controller: the namespace stays Terminating.
		if err := env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dns}}); err != nil {
			t.Fatal(err)
		}
		nsc := env.Impersonate(t, "system:serviceaccount:kube-system:namespace-controller", "system:masters")
		if err := nsc.Delete(ctx, p); err != nil {
			t.Fatalf("delete in a terminating namespace: %v", err)
		}
	})
}
