package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestValidateDeferPolicySpec(t *testing.T) {
	ok := func() *DeferPolicySpec {
		return &DeferPolicySpec{StageOut: &StageOut{URL: "s3://b/{pod}/"}}
	}
	cases := []struct {
		name string
		mod  func(*DeferPolicySpec)
		want []string // "field: type"
	}{
		{name: "minimal", mod: func(*DeferPolicySpec) {}},
		{name: "defaults are valid", mod: func(s *DeferPolicySpec) { s.Default() }},
		{name: "nothing to do", mod: func(s *DeferPolicySpec) { s.StageOut = nil },
			want: []string{"spec.stageOut: Required value"}},
		{name: "bad url and path", mod: func(s *DeferPolicySpec) { s.StageOut = &StageOut{URL: "ftp://x", Path: "../x", Include: []string{"["}} },
			want: []string{"spec.stageOut.url: Invalid value", "spec.stageOut.path: Invalid value", "spec.stageOut.include[0]: Invalid value"}},
		{name: "mem:// saves nothing", mod: func(s *DeferPolicySpec) {
			s.StageOut.URL = "mem://b/{pod}/"
			s.StageIn = []StageIn{{URL: "mem://b/in/"}}
		}, want: []string{"spec.stageOut.url: Invalid value", "spec.stageIn[0].url: Invalid value"}},
		{name: "stage-in trigger", mod: func(s *DeferPolicySpec) { s.StageIn = []StageIn{{URL: "s3://b/{trigger}"}} },
			want: []string{"spec.stageIn[0].url: Invalid value"}},
		{name: "defer containers", mod: func(s *DeferPolicySpec) {
			s.DeferContainers = []corev1.Container{{Name: "stage-out", Image: "x"}, {Name: "a", Image: "x"}, {Name: "a"}}
			s.TriggerRules = []TriggerRule{{Triggers: []Trigger{"Boom"}, DeferContainers: []string{"b"}}}
		}, want: []string{
			"spec.deferContainers[0].name: Forbidden", "spec.deferContainers[2].name: Duplicate value",
			"spec.deferContainers[2].image: Required value", "spec.triggerRules[0].triggers[0]: Unsupported value",
			"spec.triggerRules[0].deferContainers[0]: Invalid value",
		}},
		{name: "trigger rule url", mod: func(s *DeferPolicySpec) {
			s.TriggerRules = []TriggerRule{
				{Triggers: []Trigger{TriggerSucceeded}, URL: "s3://b/{namespace}/{job}/output/"},
				{Triggers: []Trigger{TriggerFailed}, URL: "s3://b/{nope}/"},
				{Triggers: []Trigger{TriggerDeleted}, Action: TriggerActionSkip, URL: "s3://b/{pod}/"},
				{Triggers: []Trigger{TriggerEvicted}, URL: "mem://b/{pod}/"},
			}
		}, want: []string{"spec.triggerRules[1].url: Invalid value", "spec.triggerRules[2].url: Invalid value", "spec.triggerRules[3].url: Invalid value"}},
		{name: "trigger rule url without stageOut", mod: func(s *DeferPolicySpec) {
			s.StageOut = nil
			s.DeferContainers = []corev1.Container{{Name: "d", Image: "x"}}
			s.TriggerRules = []TriggerRule{{Triggers: []Trigger{TriggerSucceeded}, URL: "s3://b/{job}/output/"}}
		}, want: []string{"spec.triggerRules[0].url: Invalid value"}},
		// The defer pod's volumes that are kdefer's: its stage steps' logs
		// token, /tmp and S3 CA bundle. The work volume is the user's.
		{name: "defer container mounts kdefer's volumes", mod: func(s *DeferPolicySpec) {
			s.DeferContainers = []corev1.Container{{Name: "d", Image: "x", VolumeMounts: []corev1.VolumeMount{
				{Name: "kdefer-work", MountPath: "/w"}, {Name: "kdefer-logs-token", MountPath: "/t"},
				{Name: "kdefer-tmp", MountPath: "/tmp"}, {Name: "kdefer-s3-ca", MountPath: "/ca"}}}}
		}, want: []string{
			"spec.deferContainers[0].volumeMounts[1].name: Forbidden", "spec.deferContainers[0].volumeMounts[2].name: Forbidden",
			"spec.deferContainers[0].volumeMounts[3].name: Forbidden",
		}},
		{name: "identity", mod: func(s *DeferPolicySpec) {
			s.ServiceAccountName = "stager"
			s.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
			s.WebIdentity = &WebIdentity{S3: &S3WebIdentity{RoleARN: "arn:aws:iam::1:role/r", STSEndpoint: "https://sts.example"}}
		}},
		{name: "bad identity", mod: func(s *DeferPolicySpec) {
			s.ServiceAccountName = "Stager"
			s.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "reg_cred"}}
			s.Credentials = &corev1.LocalObjectReference{Name: "keys"}
			s.WebIdentity = &WebIdentity{ExpirationSeconds: new(int64(60)), S3: &S3WebIdentity{STSEndpoint: "sts.example"}}
		}, want: []string{
			"spec.serviceAccountName: Invalid value", "spec.imagePullSecrets[0].name: Invalid value",
			"spec.webIdentity.expirationSeconds: Invalid value", "spec.webIdentity.s3.roleARN: Required value",
			"spec.webIdentity.s3.stsEndpoint: Invalid value", "spec.credentials: Invalid value",
		}},
		{name: "web identity for two stores", mod: func(s *DeferPolicySpec) {
			s.WebIdentity = &WebIdentity{S3: &S3WebIdentity{RoleARN: "r"}, Azure: &AzureWebIdentity{}}
		}, want: []string{"spec.webIdentity: Invalid value", "spec.webIdentity.azure.clientID: Required value", "spec.webIdentity.azure.tenantID: Required value"}},
		{name: "defer container mounts the web identity token", mod: func(s *DeferPolicySpec) {
			s.DeferContainers = []corev1.Container{{Name: "d", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: "kdefer-web-identity", MountPath: "/t"}}}}
		}, want: []string{"spec.deferContainers[0].volumeMounts[0].name: Forbidden"}},
		{name: "work volume named as one of kdefer's", mod: func(s *DeferPolicySpec) { s.WorkVolume.Name = "kdefer-tmp" },
			want: []string{"spec.workVolume.name: Forbidden"}},
		{name: "durations and limits", mod: func(s *DeferPolicySpec) {
			s.Deadline = &metav1.Duration{}
			s.RetryLimit = new(int32)
			*s.RetryLimit = 101
			s.OnFailure = &OnFailure{Volume: VolumeRelease, RetainFor: &metav1.Duration{Duration: 1}}
		}, want: []string{"spec.deadline: Invalid value", "spec.retryLimit: Invalid value", "spec.onFailure.retainFor: Invalid value"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := ok()
			tc.mod(s)
			var got []string
			for _, e := range ValidateDeferPolicySpec(s, field.NewPath("spec")) {
				got = append(got, e.Field+": "+e.Type.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ValidateDeferPolicySpec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultIdempotent(t *testing.T) {
	s := DeferPolicySpec{StageIn: []StageIn{{URL: "s3://b/x"}}, TriggerRules: []TriggerRule{{Triggers: []Trigger{TriggerFailed}}}}
	s.Default()
	again := *s.DeepCopy()
	again.Default()
	if diff := cmp.Diff(s, again); diff != "" {
		t.Errorf("Default is not idempotent (-once +twice):\n%s", diff)
	}
	if s.WorkVolume.Name != DefaultWorkVolumeName || s.StageIn[0].Path != DefaultStageInPath || s.TriggerRules[0].Action != TriggerActionRun {
		t.Errorf("defaults not applied: %+v", s)
	}
	if r := s.RuleFor(TriggerOOMKilled); r.Action != TriggerActionRun {
		t.Errorf("RuleFor(unlisted) = %+v, want Run", r)
	}
}

// file:// stage URLs name a directory of the node the stage step runs on:
// admission refuses them unless the cluster allows them (kdefer-controller
// --allow-file-urls); the rule is ValidateFileURLs.
func TestValidateFileURLs(t *testing.T) {
	s := &DeferPolicySpec{StageOut: &StageOut{URL: "file:///data/out/{pod}"}, StageIn: []StageIn{{URL: "s3://b/in/"}, {URL: "file:///data/in"}},
		TriggerRules: []TriggerRule{{Triggers: []Trigger{TriggerSucceeded}, URL: "file:///data/done/{job}"}}}
	if errs := ValidateDeferPolicySpec(s, field.NewPath("spec")); len(errs) > 0 {
		t.Errorf("ValidateDeferPolicySpec refuses file:// itself (the cluster's setting decides): %v", errs)
	}
	var got []string
	for _, e := range ValidateFileURLs(s, field.NewPath("spec")) {
		got = append(got, e.Error())
	}
	want := []string{
		`spec.stageOut.url: Forbidden: file:// URLs write to the node's filesystem and are allowed only when kdefer-controller runs with --allow-file-urls; fix: use s3://, gs:// or azblob://`,
		`spec.triggerRules[0].url: Forbidden: file:// URLs write to the node's filesystem and are allowed only when kdefer-controller runs with --allow-file-urls; fix: use s3://, gs:// or azblob://`,
		`spec.stageIn[1].url: Forbidden: file:// URLs write to the node's filesystem and are allowed only when kdefer-controller runs with --allow-file-urls; fix: use s3://, gs:// or azblob://`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ValidateFileURLs (-want +got):\n%s", diff)
	}
	if errs := ValidateFileURLs(&DeferPolicySpec{StageOut: &StageOut{URL: "s3://b/x"}}, field.NewPath("spec")); len(errs) > 0 {
		t.Errorf("ValidateFileURLs refuses s3://: %v", errs)
	}
}

// StageOutURL: the rule that applies to the trigger decides, else stageOut.url.
func TestStageOutURL(t *testing.T) {
	s := &DeferPolicySpec{StageOut: &StageOut{URL: "s3://b/{job}/attempts/{pod}/"}, TriggerRules: []TriggerRule{
		{Triggers: []Trigger{TriggerOOMKilled}, Include: []string{"logs/**"}},
		{Triggers: []Trigger{TriggerSucceeded}, URL: "s3://b/{job}/output/"},
		{Triggers: []Trigger{TriggerSucceeded}, URL: "s3://b/never/"},
	}}
	for trig, want := range map[Trigger]string{
		TriggerSucceeded: "s3://b/{job}/output/",
		TriggerDrained:   "s3://b/{job}/attempts/{pod}/",
		TriggerOOMKilled: "s3://b/{job}/attempts/{pod}/",
	} {
		if got := s.StageOutURL(trig); got != want {
			t.Errorf("StageOutURL(%s) = %q, want %q", trig, got, want)
		}
	}
	if got := (&DeferPolicySpec{}).StageOutURL(TriggerSucceeded); got != "" {
		t.Errorf("StageOutURL without stageOut = %q, want \"\"", got)
	}
}
