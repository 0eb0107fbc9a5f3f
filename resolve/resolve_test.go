package resolve

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// source is a Source over a list of policies, all in namespace "ns".
type source []v1.DeferPolicy

func (s source) Get(_ context.Context, _, name string) (*v1.DeferPolicy, error) {
	for i := range s {
		if s[i].Name == name {
			return &s[i], nil
		}
	}
	return nil, apierrors.NewNotFound(v1.GroupVersion.WithResource("deferpolicies").GroupResource(), name)
}

func (s source) Defaults(context.Context, string) ([]v1.DeferPolicy, error) {
	var out []v1.DeferPolicy
	for _, p := range s {
		if p.Spec.NamespaceDefault {
			out = append(out, p)
		}
	}
	return out, nil
}

func (source) ClusterPolicies(context.Context) ([]v1.ClusterDeferPolicy, error) { return nil, nil }

func (source) NamespaceLabels(context.Context, string) (map[string]string, error) { return nil, nil }

func policy(name string, def bool, locked ...v1.LockedField) v1.DeferPolicy {
	return v1.DeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: v1.DeferPolicySpec{NamespaceDefault: def, Locked: locked, StageOut: &v1.StageOut{URL: "s3://b/" + name + "/{pod}/"}}}
}

func TestPolicy(t *testing.T) {
	team := policy("team", false)
	open := policy("open", true)
	locked := policy("locked", true, v1.LockedStageIn, v1.LockedCredentials)
	cases := []struct {
		name    string
		src     source
		named   string
		want    string
		byDef   bool
		wantErr []string
	}{
		{name: "no policy, no default", src: source{team}},
		{name: "named, no default", src: source{team}, named: "team", want: "team"},
		{name: "default for a Job naming none", src: source{team, open}, want: "open", byDef: true},
		{name: "unlocked default: another may be named", src: source{team, open}, named: "team", want: "team"},
		{name: "locked default for a Job naming none", src: source{team, locked}, want: "locked", byDef: true},
		{name: "locked default named", src: source{team, locked}, named: "locked", want: "locked"},
		{name: "locked default: another is refused", src: source{team, locked}, named: "team",
			wantErr: []string{`annotation kdefer.io/policy: names DeferPolicy "team", but DeferPolicy "locked" is the default of namespace ns`, "locks stageIn, credentials (spec.locked)", `fix: remove the annotation (or set it to "locked")`}},
		{name: "locked default: a missing one is refused the same", src: source{locked}, named: "nope",
			wantErr: []string{`names DeferPolicy "nope", but DeferPolicy "locked" is the default`}},
		{name: "missing", src: source{open}, named: "nope", wantErr: []string{"not found"}},
		{name: "two defaults", src: source{locked, open}, wantErr: []string{"namespace ns has 2 default DeferPolicies (spec.namespaceDefault): locked, open; fix: keep one"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Policy(context.Background(), tc.src, Subject{Namespace: "ns", Named: tc.named})
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Policy = %q, want an error", got.Name())
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name() != tc.want || got.ByDefault != tc.byDef {
				t.Errorf("Policy = %q (by default %v), want %q (by default %v)", got.Name(), got.ByDefault, tc.want, tc.byDef)
			}
			if (got.Spec() == nil) != (tc.want == "") {
				t.Errorf("Spec() = %v for policy %q", got.Spec(), tc.want)
			}
		})
	}
	// What the webhooks and the controller tell apart.
	_, err := Policy(context.Background(), source{}, Subject{Namespace: "ns", Named: "nope"})
	if !apierrors.IsNotFound(err) {
		t.Errorf("missing policy: %v is not NotFound", err)
	}
	_, err = Policy(context.Background(), source{locked}, Subject{Namespace: "ns", Named: "team"})
	if ae := (*v1.AnnotationError)(nil); !errors.As(err, &ae) || ae.Key != v1.AnnotationPolicy {
		t.Errorf("another policy under a locked default: %v is not an AnnotationError on %s", err, v1.AnnotationPolicy)
	}
}
