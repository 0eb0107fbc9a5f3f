package render

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

const effectivePolicy = "effective policy (DeferPolicy with the Job's kdefer.io annotations)"

// EffectivePolicy applies kdefer's annotations (from a Job, or from a pod,
// where render copied them) over the named DeferPolicy's spec (nil when
// there is none) and fills in every default.
//
// The override rule: an annotation that is present replaces the policy
// field it names (kdefer.io/stage-out replaces stageOut.url,
// kdefer.io/include replaces stageOut.include, kdefer.io/stage-in replaces
// the whole stageIn list, ...); absent annotations leave the policy's
// value, and defaults fill what neither sets. kdefer.io/triggers is the one
// exception: it does not replace triggerRules but puts a Skip rule for every
// trigger it does not list in front of them, so the policy's per-trigger
// rules still shape the triggers it does list.
//
// A field the policy locks (spec.locked) is not overridden: an annotation
// that would is an error naming it and the fix.
//
// On error it still returns the policy it could build, so callers can go on
// and report every other problem too.
func EffectivePolicy(policy *v1.DeferPolicySpec, annotations map[string]string) (v1.DeferPolicySpec, error) {
	var out v1.DeferPolicySpec
	if policy != nil {
		out = *policy.DeepCopy()
		// Which objects a policy applies to is not what happens to one of
		// them: a run's snapshot does not say it.
		out.NamespaceDefault = false
	}
	a, perr := v1.ParseAnnotations(annotations)
	var errs []error
	if perr != nil {
		errs = append(errs, perr)
	}
	fail := func(key, problem, fix string) {
		errs = append(errs, &v1.AnnotationError{Key: key, Value: annotations[key], Problem: problem, Fix: fix})
	}
	if policy != nil {
		for _, f := range policy.Locked {
			for _, key := range v1.LockedAnnotations[f] {
				if _, ok := annotations[key]; !ok {
					continue
				}
				fail(key, fmt.Sprintf("overrides the DeferPolicy's %s, which the policy locks (spec.locked)", f),
					fmt.Sprintf("remove the annotation and use the policy's %s, or ask the policy's owner for another policy", f))
			}
		}
		// Locked fields keep the policy's values: never build (or report
		// problems of) what the Job is not allowed to ask for.
		lockedOut(a, policy.Locked)
	}

	if a.StageOut != nil || a.StageOutPath != nil || a.Include != nil || a.Exclude != nil {
		if out.StageOut == nil && a.StageOut == nil {
			for _, k := range []string{v1.AnnotationStageOutPath, v1.AnnotationInclude, v1.AnnotationExclude} {
				if _, ok := annotations[k]; ok {
					fail(k, "is set, but no stage-out URL is", "set "+v1.AnnotationStageOut+" (or stageOut.url in the DeferPolicy)")
				}
			}
		} else {
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
		}
	}
	if a.StageIn != nil {
		out.StageIn = nil
		for _, u := range a.StageIn {
			in := v1.StageIn{URL: u}
			if a.StageInPath != nil {
				in.Path = *a.StageInPath
			}
			out.StageIn = append(out.StageIn, in)
		}
	} else if a.StageInPath != nil {
		if len(out.StageIn) == 0 {
			fail(v1.AnnotationStageInPath, "is set, but there is nothing to stage in", "set "+v1.AnnotationStageIn+" (or stageIn in the DeferPolicy), or remove the annotation")
		}
		for i := range out.StageIn {
			out.StageIn[i].Path = *a.StageInPath
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

	_, stageOutSet := annotations[v1.AnnotationStageOut]
	if out.StageOut == nil && len(out.DeferContainers) == 0 && !stageOutSet {
		if a.Policy == "" {
			fail(v1.AnnotationStageOut, "is not set and no DeferPolicy is named, so kdefer has nothing to do after the pod ends",
				"set "+v1.AnnotationStageOut+": s3://bucket/prefix/{pod}/ or name a DeferPolicy with "+v1.AnnotationPolicy)
		} else {
			fail(v1.AnnotationStageOut, fmt.Sprintf("is not set and DeferPolicy %q has neither stageOut nor deferContainers", a.Policy),
				"set "+v1.AnnotationStageOut+" or spec.stageOut.url in the DeferPolicy")
		}
	} else if len(errs) == 0 && (out.StageOut != nil || len(out.DeferContainers) > 0) {
		// Annotations were well-formed; check the merged result (which may
		// hold the policy's own values) with the policy's rules.
		for _, e := range v1.ValidateDeferPolicySpec(&out, field.NewPath("policy")) {
			errs = append(errs, fmt.Errorf("%s: %s", effectivePolicy, e.Error()))
		}
	}
	return out, errors.Join(errs...)
}

// lockedOut drops from a the annotations the locked fields forbid.
func lockedOut(a *v1.Annotations, locked []v1.LockedField) {
	for _, f := range locked {
		switch f {
		case v1.LockedStageOut:
			a.StageOut, a.StageOutPath, a.Include, a.Exclude = nil, nil, nil, nil
		case v1.LockedStageIn:
			a.StageIn, a.StageInPath = nil, nil
		case v1.LockedCredentials:
			a.Credentials = nil
		}
	}
}

// clusterRules checks an effective policy against what this cluster allows
// beyond ValidateDeferPolicySpec (Options): file:// URLs.
func clusterRules(pol *v1.DeferPolicySpec, opts Options) []error {
	if opts.AllowFileURLs {
		return nil
	}
	var errs []error
	for _, e := range v1.ValidateFileURLs(pol, field.NewPath("policy")) {
		errs = append(errs, fmt.Errorf("%s: %s", effectivePolicy, e.Error()))
	}
	return errs
}
