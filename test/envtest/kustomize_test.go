package envtest_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/certs"
	kwebhook "github.com/kdefer/kdefer/controller/webhook"
	"github.com/kdefer/kdefer/test/envtest"
)

func testKustomize(t *testing.T, env *envtest.Env) {
	objs := envtest.DecodeObjects(t, envtest.Kustomize(t, "deploy"))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	want := map[string]int{
		"Namespace": 2, "CustomResourceDefinition": 3, "ServiceAccount": 2, "ClusterRole": 6, "ClusterRoleBinding": 3,
		"Role": 5, "RoleBinding": 5, "Deployment": 1, "DaemonSet": 1, "PodDisruptionBudget": 1, "Service": 2, "MutatingWebhookConfiguration": 1,
		"ValidatingWebhookConfiguration": 1, "ValidatingAdmissionPolicy": 2, "ValidatingAdmissionPolicyBinding": 2,
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("kinds in kubectl kustomize deploy/ (-want +got):\n%s", diff)
	}
	// Everything is accepted by a real apiserver (replacing envtest's
	// webhook configurations, which point at the in-process server).
	ctx := context.Background()
	_ = env.Client.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kdefer"}})
	_ = env.Client.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kdefer"}})
	envtest.Apply(t, env.Client, objs...)

	dep := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-controller"}, dep); err != nil {
		t.Fatal(err)
	}
	ps := dep.Spec.Template.Spec
	c := ps.Containers[0]
	sc := c.SecurityContext
	if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot ||
		sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("manager is not non-root with a read-only root FS and no capabilities: %+v %+v", ps.SecurityContext, sc)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("manager has no probes")
	}
	// The node agent: root (the kubelet's log files are root's) but with no
	// capability, no escalation, a read-only root file system, and only the
	// serving pair of its certificate Secret, never the CA key.
	ds := &appsv1.DaemonSet{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kdefer-node", Name: "kdefer-node"}, ds); err != nil {
		t.Fatal(err)
	}
	asc := ds.Spec.Template.Spec.Containers[0].SecurityContext
	if asc == nil || !*asc.ReadOnlyRootFilesystem || *asc.AllowPrivilegeEscalation || len(asc.Capabilities.Drop) != 1 || asc.Capabilities.Drop[0] != "ALL" || len(asc.Capabilities.Add) > 0 {
		t.Errorf("node agent has capabilities, escalation or a writable root FS: %+v", asc)
	}
	for _, vol := range ds.Spec.Template.Spec.Volumes {
		if vol.Secret == nil {
			continue
		}
		for _, it := range vol.Secret.Items {
			if it.Key == certs.CAKeyKey {
				t.Errorf("node agent mounts its Secret's %s", certs.CAKeyKey)
			}
		}
		if len(vol.Secret.Items) == 0 {
			t.Errorf("node agent mounts all of Secret %s, its CA key too", vol.Secret.SecretName)
		}
	}
	// Draining the node of a replica must not pause runs: two replicas
	// electing a leader, spread over nodes when they can be, and a budget
	// that lets a drain take one at a time.
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 || !slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("manager: %v replicas, args %v: want 2 or more, electing a leader", dep.Spec.Replicas, c.Args)
	}
	if a := ps.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != corev1.LabelHostname ||
		!cmp.Equal(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels, dep.Spec.Template.Labels) {
		t.Errorf("manager replicas are not spread over nodes: affinity %+v", a)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-controller"}, pdb); err != nil {
		t.Fatalf("manager budget: %v", err)
	}
	if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 || !cmp.Equal(pdb.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels) {
		t.Errorf("manager budget: maxUnavailable %v selector %+v: want 1, the Deployment's pods", mu, pdb.Spec.Selector)
	}
	if ps.ServiceAccountName != "kdefer-controller" || !strings.HasSuffix(kdeferSA, ":"+ps.ServiceAccountName) {
		t.Errorf("service account %q does not match the admission policy's %q", ps.ServiceAccountName, kdeferSA)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "kdefer"}, mwc); err != nil {
		t.Fatal(err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "kdefer"}, vwc); err != nil {
		t.Fatal(err)
	}
	type hook struct {
		name     string
		fp       *admissionregistrationv1.FailurePolicyType
		se       *admissionregistrationv1.SideEffectClass
		timeout  *int32
		selector *metav1.LabelSelector
		svc      *admissionregistrationv1.ServiceReference
	}
	var hooks []hook
	for _, w := range mwc.Webhooks {
		hooks = append(hooks, hook{w.Name, w.FailurePolicy, w.SideEffects, w.TimeoutSeconds, w.ObjectSelector, w.ClientConfig.Service})
	}
	for _, w := range vwc.Webhooks {
		hooks = append(hooks, hook{w.Name, w.FailurePolicy, w.SideEffects, w.TimeoutSeconds, w.ObjectSelector, w.ClientConfig.Service})
	}
	paths := map[string]bool{kwebhook.MutateJobPath: true, kwebhook.ValidateJobPath: true, kwebhook.ValidatePolicyPath: true,
		kwebhook.ValidateEvictionPath: true, kwebhook.ArmPVCPath: true, kwebhook.MutatePodPath: true, kwebhook.ValidateCronJobPath: true,
		kwebhook.ValidateClusterPolicyPath: true, kwebhook.MutateNamespacePath: true}
	for _, h := range hooks {
		// Job and policy webhooks fail closed (nothing unrendered gets in);
		// the eviction guard and the arming fail open (kdefer down must
		// not block drains, nor pods' volumes: the controller arms later).
		wantFP, wantSE := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
		switch h.name {
		case "evictions.pods.kdefer.io":
			wantFP = admissionregistrationv1.Ignore
		case "validate.cronjobs.kdefer.io":
			// It only tells earlier what the Job webhook enforces.
			wantFP = admissionregistrationv1.Ignore
		case "label.namespaces.kdefer.io":
			// A namespace is never blocked; the controller labels it later.
			wantFP = admissionregistrationv1.Ignore
		case "arm.persistentvolumeclaims.kdefer.io":
			// It creates the pod's DeferRun, except on a dry run.
			wantFP, wantSE = admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNoneOnDryRun
			if len(h.selector.MatchExpressions) != 1 || h.selector.MatchExpressions[0].Key != v1.LabelWorkVolume {
				t.Errorf("webhook %s does not select on %s: %+v", h.name, v1.LabelWorkVolume, h.selector)
			}
		}
		if *h.fp != wantFP || *h.se != wantSE || *h.timeout > 10 {
			t.Errorf("webhook %s: failurePolicy %s sideEffects %s timeout %d", h.name, *h.fp, *h.se, *h.timeout)
		}
		if (strings.HasSuffix(h.name, ".jobs.kdefer.io") || h.name == "render.pods.kdefer.io") && h.selector.MatchLabels[v1.LabelEnabled] != "true" {
			t.Errorf("webhook %s does not select on %s", h.name, v1.LabelEnabled)
		}
		if h.svc == nil || h.svc.Name != "kdefer-webhook" || h.svc.Namespace != "kdefer-system" || !paths[*h.svc.Path] {
			t.Errorf("webhook %s: client config %+v", h.name, h.svc)
		}
	}
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-webhook"}, svc); err != nil {
		t.Fatalf("webhook Service: %v", err)
	}

	t.Run("self-managed certificates", func(t *testing.T) {
		r := certs.New(env.Client, certs.Options{CertDir: t.TempDir()}, logr.Discard())
		if err := r.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		sec := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kdefer-system", Name: "kdefer-webhook-cert"}, sec); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "kdefer"}, mwc); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "kdefer"}, vwc); err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]byte{mwc.Webhooks[0].ClientConfig.CABundle, vwc.Webhooks[0].ClientConfig.CABundle, vwc.Webhooks[1].ClientConfig.CABundle} {
			if len(b) == 0 || string(b) != string(sec.Data[certs.CACertKey]) {
				t.Error("a webhook's caBundle is not the generated CA")
			}
		}
	})

	t.Run("overlays", func(t *testing.T) {
		local := envtest.DecodeObjects(t, envtest.Kustomize(t, "deploy/overlays/local"))
		for _, o := range local {
			if o.GetKind() == "ValidatingWebhookConfiguration" || o.GetKind() == "MutatingWebhookConfiguration" {
				hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
				for _, h := range hooks {
					url, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "url")
					if !strings.HasPrefix(url, "https://127.0.0.1:9443/") {
						t.Errorf("local overlay: webhook url %q", url)
					}
				}
			}
		}
		for _, o := range local {
			if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("kdefer-test"), client.ForceOwnership, client.DryRunAll); err != nil {
				t.Errorf("local overlay: %s %s rejected: %v", o.GetKind(), o.GetName(), err)
			}
		}
		cm := envtest.DecodeObjects(t, envtest.Kustomize(t, "deploy/overlays/cert-manager"))
		found := false
		for _, o := range cm {
			found = found || (o.GetKind() == "Certificate" && o.GetName() == "kdefer-webhook-cert")
		}
		if !found {
			t.Error("cert-manager overlay has no Certificate")
		}
	})
}
