package controller

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/resolve"
)

// TestRunForNamespaceDefault: a pod is armed with its namespace's default
// DeferPolicy when it names none, as admission rendered it; what admission
// refuses (another policy, a locked annotation) is a ConfigError of the
// run, for a pod admitted before the default existed.
func TestRunForNamespaceDefault(t *testing.T) {
	def := rt.MakePolicy("platform", "ns", "s3://platform/{pod}/").NamespaceDefault().Credentials("platform-creds").
		Locked(v1.LockedStageOut, v1.LockedCredentials).Obj()
	team := rt.MakePolicy("team", "ns", "s3://team/{pod}/").Obj()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(def, team).
		WithIndex(&v1.DeferPolicy{}, resolve.IndexNamespaceDefault, resolve.NamespaceDefaultIndex).Build()
	bare := func(name string) *kt.PodWrapper {
		p := kt.MakePod(name, "ns")
		delete(p.Annotations, v1.AnnotationStageOut)
		return p
	}
	for _, tc := range []struct {
		name       string
		pod        *kt.PodWrapper
		wantPolicy string
		wantErr    string
	}{
		{name: "names none", pod: bare("plain"), wantPolicy: "platform"},
		{name: "names the default", pod: bare("named").Annotation(v1.AnnotationPolicy, "platform"), wantPolicy: "platform"},
		{name: "names another", pod: bare("other").Annotation(v1.AnnotationPolicy, "team"), wantPolicy: "team",
			wantErr: `annotation kdefer.io/policy: names DeferPolicy "team", but DeferPolicy "platform" is the default of namespace ns`},
		{name: "sets a locked annotation", pod: bare("own").Annotation(v1.AnnotationCredentials, "mine"), wantPolicy: "platform",
			wantErr: "annotation kdefer.io/credentials: overrides the DeferPolicy's credentials, which the policy locks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, err := RunFor(context.Background(), c, tc.pod.Obj())
			if err != nil {
				t.Fatal(err)
			}
			if run.Spec.PolicyName != tc.wantPolicy {
				t.Errorf("spec.policyName = %q, want %q", run.Spec.PolicyName, tc.wantPolicy)
			}
			got := run.Annotations[annotationConfigError]
			if tc.wantErr == "" {
				if got != "" {
					t.Errorf("config error %q", got)
				}
				if so := run.Spec.Policy.StageOut; so == nil || so.URL != "s3://platform/{pod}/" || run.Spec.Policy.Credentials.Name != "platform-creds" {
					t.Errorf("policy snapshot %+v is not the default's", run.Spec.Policy)
				}
				if run.Spec.Policy.NamespaceDefault {
					t.Error("the run's policy snapshot says namespaceDefault")
				}
				return
			}
			if !strings.Contains(got, tc.wantErr) {
				t.Errorf("config error %q, want it to contain %q", got, tc.wantErr)
			}
		})
	}
}
