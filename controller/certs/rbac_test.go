package certs

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestWebhookConfigurationRBAC: the hand-written ClusterRole in deploy/rbac
// (markers cannot say resourceNames) lets the rotator get and update exactly
// the webhook configurations it patches by default, and the generated role
// grants nothing on webhook configurations besides.
func TestWebhookConfigurationRBAC(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "rbac")
	roles := func(file string) []rbacv1.ClusterRole {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var out []rbacv1.ClusterRole
		for _, doc := range bytes.Split(data, []byte("\n---\n")) {
			var r rbacv1.ClusterRole
			if err := yaml.Unmarshal(doc, &r); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if r.Kind == "ClusterRole" {
				out = append(out, r)
			}
		}
		return out
	}
	webhookRules := func(rs []rbacv1.ClusterRole) []rbacv1.PolicyRule {
		var out []rbacv1.PolicyRule
		for _, r := range rs {
			for _, rule := range r.Rules {
				if slices.Contains(rule.APIGroups, "admissionregistration.k8s.io") {
					out = append(out, rule)
				}
			}
		}
		return out
	}
	if rules := webhookRules(roles("role.yaml")); len(rules) != 0 {
		t.Errorf("the generated role grants %+v on webhook configurations; only webhook_configurations_role.yaml may, by name", rules)
	}
	rules := webhookRules(roles("webhook_configurations_role.yaml"))
	if len(rules) != 1 {
		t.Fatalf("webhook_configurations_role.yaml has %d rules on webhook configurations, want 1", len(rules))
	}
	rule := rules[0]
	opts := Options{}.withDefaults()
	names := slices.Concat(opts.MutatingWebhooks, opts.ValidatingWebhooks)
	slices.Sort(names)
	names = slices.Compact(names)
	got := slices.Clone(rule.ResourceNames)
	slices.Sort(got)
	if !slices.Equal(got, names) {
		t.Errorf("resourceNames %v, want the rotator's webhook configurations %v", rule.ResourceNames, names)
	}
	verbs := slices.Clone(rule.Verbs)
	slices.Sort(verbs)
	if !slices.Equal(verbs, []string{"get", "update"}) {
		t.Errorf("verbs %v, want get and update (the rotator neither lists nor watches)", rule.Verbs)
	}
	res := slices.Clone(rule.Resources)
	slices.Sort(res)
	if !slices.Equal(res, []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}) {
		t.Errorf("resources %v", rule.Resources)
	}
}
