package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of a DeferPolicySpec. Default fills them in; the effective policy
// a DeferRun records has every one of them set.
const (
	DefaultWorkVolumeName                = "kdefer-work"
	DefaultWorkMountPath                 = "/kdefer"
	DefaultWorkSize                      = "1Gi"
	DefaultStageInPath                   = "inputs"
	DefaultDeadline                      = 30 * time.Minute
	DefaultRetryLimit              int32 = 3
	DefaultTTLSecondsAfterFinished int32 = 86400
	DefaultNodeLostTimeout               = 10 * time.Minute
)

// Default sets every unset field that has a default. It is idempotent.
func (s *DeferPolicySpec) Default() {
	if s.WorkVolume.Name == "" {
		s.WorkVolume.Name = DefaultWorkVolumeName
	}
	if s.WorkVolume.MountPath == "" {
		s.WorkVolume.MountPath = DefaultWorkMountPath
	}
	if s.WorkVolume.Size == nil {
		q := resource.MustParse(DefaultWorkSize)
		s.WorkVolume.Size = &q
	}
	if len(s.WorkVolume.AccessModes) == 0 {
		s.WorkVolume.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	for i := range s.StageIn {
		if s.StageIn[i].Path == "" {
			s.StageIn[i].Path = DefaultStageInPath
		}
	}
	for i := range s.TriggerRules {
		if s.TriggerRules[i].Action == "" {
			s.TriggerRules[i].Action = TriggerActionRun
		}
	}
	if s.Deadline == nil {
		s.Deadline = &metav1.Duration{Duration: DefaultDeadline}
	}
	if s.RetryLimit == nil {
		v := DefaultRetryLimit
		s.RetryLimit = &v
	}
	if s.OnFailure == nil {
		s.OnFailure = &OnFailure{Volume: VolumeRetain}
	}
	if s.TTLSecondsAfterFinished == nil {
		v := DefaultTTLSecondsAfterFinished
		s.TTLSecondsAfterFinished = &v
	}
	if s.PrePull == nil {
		v := true
		s.PrePull = &v
	}
	if s.DeleteEndedPod == "" {
		s.DeleteEndedPod = PodDeletionOnPressure
	}
	if s.NodeLostTimeout == nil {
		s.NodeLostTimeout = &metav1.Duration{Duration: DefaultNodeLostTimeout}
	}
}

// RuleFor returns the trigger rule that applies to t: the first rule that
// lists it, or a Run rule with no overrides when none does.
func (s *DeferPolicySpec) RuleFor(t Trigger) TriggerRule {
	for _, r := range s.TriggerRules {
		for _, rt := range r.Triggers {
			if rt == t {
				if r.Action == "" {
					r.Action = TriggerActionRun
				}
				return r
			}
		}
	}
	return TriggerRule{Triggers: []Trigger{t}, Action: TriggerActionRun}
}

// StageOutURL returns the stage-out URL template for trigger t: the url of
// the rule that applies to t, else stageOut.url ("" without stageOut).
func (s *DeferPolicySpec) StageOutURL(t Trigger) string {
	if s.StageOut == nil {
		return ""
	}
	if u := s.RuleFor(t).URL; u != "" {
		return u
	}
	return s.StageOut.URL
}
