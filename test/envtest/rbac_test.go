package envtest_test

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kdefer/kdefer/test/envtest"
)

// TestLeastPrivilege: kdefer's ServiceAccount, with exactly the RBAC of
// deploy/rbac on a real apiserver, reads no Secret outside its own
// namespace and touches no webhook configuration but its own.
func TestLeastPrivilege(t *testing.T) {
	env := envtest.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"kdefer-system", "tenant"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	envtest.Apply(t, env.Client, envtest.DecodeObjects(t, envtest.Kustomize(t, "deploy/rbac"))...)
	for _, name := range []string{"kdefer", "someone-else"} {
		if err := env.Client.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: "tenant"}}); err != nil {
		t.Fatal(err)
	}
	sa := env.Impersonate(t, kdeferSA, "system:serviceaccounts", "system:serviceaccounts:kdefer-system", "system:authenticated")

	allowed := func(what string, err error) {
		t.Helper()
		if apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want it allowed", what, err)
		}
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}

	// Secrets: the webhook certificate's in kdefer-system only, by name;
	// not Helm's release Secrets beside it.
	allowed("get a Secret in kdefer-system", client.IgnoreNotFound(sa.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-webhook-cert"}, &corev1.Secret{})))
	allowed("create the webhook certificate Secret", sa.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kdefer-system", Name: "kdefer-webhook-cert"}}))
	own := &corev1.Secret{}
	allowed("get the webhook certificate Secret", sa.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-webhook-cert"}, own))
	own.StringData = map[string]string{"ca.crt": "x"}
	allowed("update the webhook certificate Secret", sa.Update(ctx, own))
	release := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kdefer-system", Name: "sh.helm.release.v1.kdefer.v1"}}
	if err := env.Client.Create(ctx, release); err != nil {
		t.Fatal(err)
	}
	forbidden("get another Secret in kdefer-system", sa.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: release.Name}, &corev1.Secret{}))
	forbidden("update another Secret in kdefer-system", sa.Update(ctx, release))
	forbidden("list Secrets in kdefer-system", sa.List(ctx, &corev1.SecretList{}, client.InNamespace("kdefer-system")))
	forbidden("delete the webhook certificate Secret", sa.Delete(ctx, own))
	forbidden("get a tenant's Secret", sa.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "s3-creds"}, &corev1.Secret{}))
	forbidden("get a tenant's Secret's metadata", sa.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "s3-creds"}, secretMeta()))
	forbidden("list Secrets", sa.List(ctx, &corev1.SecretList{}))

	// Webhook configurations: kdefer's own, by name.
	for kind, obj := range map[string]client.Object{
		"MutatingWebhookConfiguration":   &admissionregistrationv1.MutatingWebhookConfiguration{},
		"ValidatingWebhookConfiguration": &admissionregistrationv1.ValidatingWebhookConfiguration{},
	} {
		own := obj.DeepCopyObject().(client.Object)
		allowed("get kdefer's "+kind, sa.Get(ctx, client.ObjectKey{Name: "kdefer"}, own))
		allowed("update kdefer's "+kind, sa.Update(ctx, own))
		other := obj.DeepCopyObject().(client.Object)
		forbidden("get another "+kind, sa.Get(ctx, client.ObjectKey{Name: "someone-else"}, other))
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "someone-else"}, other); err != nil {
			t.Fatal(err)
		}
		forbidden("update another "+kind, sa.Update(ctx, other))
	}
	forbidden("list MutatingWebhookConfigurations", sa.List(ctx, &admissionregistrationv1.MutatingWebhookConfigurationList{}))
	forbidden("list ValidatingWebhookConfigurations", sa.List(ctx, &admissionregistrationv1.ValidatingWebhookConfigurationList{}))
}

func secretMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}
