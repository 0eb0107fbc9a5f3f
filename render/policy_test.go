package render_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	rt "github.com/kdefer/kdefer/render/testing"
)

// A DeferPolicy's locked fields keep its values: a Job annotation that would
// override one is refused, naming the annotation, what it overrides and the
// fix; unlocked annotations still override.
func TestEffectivePolicyLocked(t *testing.T) {
	policy := rt.MakePolicy("p", ns, "s3://team/{pod}/").Credentials("team").StageIn("s3://in/a/", "a").Obj().Spec
	policy.Locked = []v1.LockedField{v1.LockedStageOut, v1.LockedCredentials}
	cases := map[string]struct {
		annotations map[string]string
		refused     []string
	}{
		"destination":          {annotations: map[string]string{v1.AnnotationStageOut: "s3://elsewhere/{pod}/"}, refused: []string{v1.AnnotationStageOut}},
		"path and filters":     {annotations: map[string]string{v1.AnnotationStageOutPath: "out", v1.AnnotationExclude: "*.key"}, refused: []string{v1.AnnotationStageOutPath, v1.AnnotationExclude}},
		"credentials":          {annotations: map[string]string{v1.AnnotationCredentials: "stolen"}, refused: []string{v1.AnnotationCredentials}},
		"stage-in is unlocked": {annotations: map[string]string{v1.AnnotationStageIn: "s3://in/c/", v1.AnnotationDeadline: "1h"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := render.EffectivePolicy(&policy, tc.annotations)
			if len(tc.refused) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got.StageIn[0].URL != "s3://in/c/" {
					t.Errorf("stageIn %+v, want the annotation's", got.StageIn)
				}
				return
			}
			if err == nil {
				t.Fatalf("admitted: stageOut %+v, credentials %+v", got.StageOut, got.Credentials)
			}
			for _, key := range tc.refused {
				if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "which the policy locks (spec.locked)") || !strings.Contains(err.Error(), "remove the annotation") {
					t.Errorf("error %q does not name %s, the lock and the fix", err, key)
				}
			}
			if got.StageOut.URL != "s3://team/{pod}/" || got.StageOut.Path != "" || len(got.StageOut.Exclude) != 0 || got.Credentials.Name != "team" {
				t.Errorf("locked fields changed: stageOut %+v, credentials %+v", got.StageOut, got.Credentials)
			}
		})
	}
}

func TestEffectivePolicyOverride(t *testing.T) {
	policy := rt.MakePolicy("p", ns, "s3://team/{pod}/").Credentials("team").StageIn("s3://in/a/", "a").StageIn("s3://in/b/", "b").
		TriggerRule(v1.TriggerRule{Triggers: []v1.Trigger{v1.TriggerOOMKilled}, Include: []string{"logs/**"}}).Obj().Spec
	got, err := render.EffectivePolicy(&policy, map[string]string{
		v1.AnnotationStageOut:    "s3://mine/{pod}/",
		v1.AnnotationStageInPath: "in",
		v1.AnnotationTriggers:    "Succeeded,OOMKilled",
		v1.AnnotationWorkSize:    "5Gi",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.StageOut.URL != "s3://mine/{pod}/" || got.Credentials.Name != "team" {
		t.Errorf("stage-out/credentials = %q/%v", got.StageOut.URL, got.Credentials)
	}
	if diff := cmp.Diff([]v1.StageIn{{URL: "s3://in/a/", Path: "in"}, {URL: "s3://in/b/", Path: "in"}}, got.StageIn); diff != "" {
		t.Errorf("stageIn (-want +got):\n%s", diff)
	}
	if r := got.RuleFor(v1.TriggerFailed); r.Action != v1.TriggerActionSkip {
		t.Errorf("unlisted trigger Failed: action %s, want Skip", r.Action)
	}
	if r := got.RuleFor(v1.TriggerOOMKilled); r.Action != v1.TriggerActionRun || len(r.Include) != 1 {
		t.Errorf("listed trigger OOMKilled keeps the policy's rule: %+v", r)
	}
	if got.WorkVolume.Size.String() != "5Gi" || got.WorkVolume.Name != v1.DefaultWorkVolumeName {
		t.Errorf("work volume %+v", got.WorkVolume)
	}
	if policy.StageOut.URL != "s3://team/{pod}/" {
		t.Errorf("EffectivePolicy modified the policy")
	}
}
