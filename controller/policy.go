package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// EffectivePolicy applies a pod's kdefer.io annotations (copied there from
// the Job by render) over the named DeferPolicy's spec (nil when there is
// none) and fills in every default. It is the function render provides as
// render.EffectivePolicy; this local copy is used until that lands, so both
// compute the same thing from the same parser (v1alpha1.ParseAnnotations).
var EffectivePolicy = effectivePolicy

func effectivePolicy(policy *v1.DeferPolicySpec, annotations map[string]string) (v1.DeferPolicySpec, error) {
	var out v1.DeferPolicySpec
	if policy != nil {
		out = *policy.DeepCopy()
	}
	a, err := v1.ParseAnnotations(annotations)
	if err != nil {
		return out, err
	}
	if a.StageOut != nil || a.StageOutPath != nil || a.Include != nil || a.Exclude != nil {
		if out.StageOut == nil {
			out.StageOut = &v1.StageOut{}
		}
		if a.StageOut != nil {
			out.StageOut.URL = *a.StageOut
		}
		if a.StageOutPath != nil {
			out.StageOut.Path = *a.StageOutPath
		}
		if a.Include != nil {
			out.StageOut.Include = a.Include
		}
		if a.Exclude != nil {
			out.StageOut.Exclude = a.Exclude
		}
		if out.StageOut.URL == "" {
			return out, fmt.Errorf("stage-out options are set but no URL: set %s or spec.stageOut.url", v1.AnnotationStageOut)
		}
	}
	if a.Credentials != nil {
		out.Credentials = &corev1.LocalObjectReference{Name: *a.Credentials}
	}
	if a.WorkVolume != nil {
		out.WorkVolume.Name = *a.WorkVolume
	}
	if a.WorkMountPath != nil {
		out.WorkVolume.MountPath = *a.WorkMountPath
	}
	if a.WorkSize != nil {
		q := a.WorkSize.DeepCopy()
		out.WorkVolume.Size = &q
	}
	if a.StorageClass != nil {
		sc := *a.StorageClass
		out.WorkVolume.StorageClassName = &sc
	}
	if a.Triggers != nil {
		// Triggers the annotation does not list skip the defer steps; the
		// policy's own rules still decide what the listed ones do.
		listed := map[v1.Trigger]bool{}
		for _, t := range a.Triggers {
			listed[t] = true
		}
		var skip []v1.Trigger
		for _, t := range v1.AllTriggers {
			if !listed[t] {
				skip = append(skip, t)
			}
		}
		if len(skip) > 0 {
			out.TriggerRules = append([]v1.TriggerRule{{Triggers: skip, Action: v1.TriggerActionSkip}}, out.TriggerRules...)
		}
	}
	if a.Deadline != nil {
		d := *a.Deadline
		out.Deadline = &d
	}
	out.Default()
	return out, nil
}
