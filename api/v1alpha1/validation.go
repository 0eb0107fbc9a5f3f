package v1alpha1

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateDeferPolicySpec checks what the CRD's OpenAPI and CEL rules check,
// and the cross-field rules they cannot (defer container names, trigger
// rules naming defer containers, globs, defer containers that would weaken
// the defer pod's Pod Security, see podsecurity.go, or mount kdefer's own
// volumes, see reserved.go). The DeferPolicy webhook and render
// (on the effective policy) use it, so every path reports the same
// messages, each naming the field.
func ValidateDeferPolicySpec(s *DeferPolicySpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.StageOut == nil && len(s.DeferContainers) == 0 {
		errs = append(errs, field.Required(fld.Child("stageOut"),
			"a policy needs stageOut or at least one entry in deferContainers: set spec.stageOut.url (or the annotation "+AnnotationStageOut+" on the Job)"))
	}
	if so := s.StageOut; so != nil {
		p := fld.Child("stageOut")
		if msg := CheckStageURL(so.URL, false); msg != "" {
			errs = append(errs, field.Invalid(p.Child("url"), so.URL, msg))
		}
		if so.Path != "" {
			if msg := CheckRelativePath(so.Path); msg != "" {
				errs = append(errs, field.Invalid(p.Child("path"), so.Path, msg))
			}
		}
		errs = append(errs, validateGlobs(so.Include, p.Child("include"))...)
		errs = append(errs, validateGlobs(so.Exclude, p.Child("exclude"))...)
		if l := so.Logs; l != nil && l.MaxBytes != nil && (l.MaxBytes.Sign() <= 0 || l.MaxBytes.Cmp(maxLogsMaxBytes) > 0) {
			errs = append(errs, field.Invalid(p.Child("logs", "maxBytes"), l.MaxBytes.String(), "must be more than 0 and at most "+maxLogsMaxBytes.String()))
		}
	}
	for i, in := range s.StageIn {
		p := fld.Child("stageIn").Index(i)
		if msg := CheckStageURL(in.URL, true); msg != "" {
			errs = append(errs, field.Invalid(p.Child("url"), in.URL, msg))
		}
		if in.Path != "" {
			if msg := CheckRelativePath(in.Path); msg != "" {
				errs = append(errs, field.Invalid(p.Child("path"), in.Path, msg))
			}
		}
	}
	if s.S3 != nil {
		errs = append(errs, validateS3Settings(s.S3, fld.Child("s3"))...)
	}
	if s.Credentials != nil {
		for _, m := range validation.IsDNS1123Subdomain(s.Credentials.Name) {
			errs = append(errs, field.Invalid(fld.Child("credentials", "name"), s.Credentials.Name, m))
		}
	}
	errs = append(errs, validateIdentity(s, fld)...)
	wv := fld.Child("workVolume")
	if n := s.WorkVolume.Name; n != "" {
		for _, m := range validation.IsDNS1123Label(n) {
			errs = append(errs, field.Invalid(wv.Child("name"), n, m))
		}
		errs = append(errs, ValidateVolumeName(n, wv.Child("name"))...)
	}
	if mp := s.WorkVolume.MountPath; mp != "" && !IsMountPath(mp) {
		errs = append(errs, field.Invalid(wv.Child("mountPath"), mp, "must be an absolute path without '..' or ':'"))
	}
	if sz := s.WorkVolume.Size; sz != nil && sz.Sign() <= 0 {
		errs = append(errs, field.Invalid(wv.Child("size"), sz.String(), "must be positive"))
	}
	names := map[string]bool{}
	for i, c := range s.DeferContainers {
		p := fld.Child("deferContainers").Index(i)
		reserved := ValidateDeferContainerName(c.Name, p.Child("name"))
		switch {
		case len(reserved) > 0:
			errs = append(errs, reserved...)
		case names[c.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
		default:
			for _, m := range validation.IsDNS1123Label(c.Name) {
				errs = append(errs, field.Invalid(p.Child("name"), c.Name, m))
			}
		}
		names[c.Name] = true
		if c.Image == "" {
			errs = append(errs, field.Required(p.Child("image"), "every defer container needs an image"))
		}
		errs = append(errs, ValidateVolumeMounts(c.VolumeMounts, p.Child("volumeMounts"))...)
		errs = append(errs, validateDeferContainerSecurity(&c, s.Credentials, p)...)
	}
	seen := map[Trigger]int{}
	for i, r := range s.TriggerRules {
		p := fld.Child("triggerRules").Index(i)
		if len(r.Triggers) == 0 {
			errs = append(errs, field.Required(p.Child("triggers"), "a trigger rule lists at least one trigger"))
		}
		for j, t := range r.Triggers {
			if !t.IsValid() {
				errs = append(errs, field.NotSupported(p.Child("triggers").Index(j), t, triggerStrings()))
			}
			if _, dup := seen[t]; !dup {
				seen[t] = i
			}
		}
		if r.Action != "" && r.Action != TriggerActionRun && r.Action != TriggerActionSkip {
			errs = append(errs, field.NotSupported(p.Child("action"), r.Action, []string{string(TriggerActionRun), string(TriggerActionSkip)}))
		}
		errs = append(errs, validateGlobs(r.Include, p.Child("include"))...)
		errs = append(errs, validateGlobs(r.Exclude, p.Child("exclude"))...)
		errs = append(errs, validateRuleURL(s, r, p.Child("url"))...)
		for j, n := range r.DeferContainers {
			if !names[n] {
				errs = append(errs, field.Invalid(p.Child("deferContainers").Index(j), n, "names no entry of spec.deferContainers"))
			}
		}
	}
	if d := s.Deadline; d != nil && d.Duration <= 0 {
		errs = append(errs, field.Invalid(fld.Child("deadline"), d.Duration.String(), "must be positive"))
	}
	if d := s.NodeLostTimeout; d != nil && d.Duration <= 0 {
		errs = append(errs, field.Invalid(fld.Child("nodeLostTimeout"), d.Duration.String(), "must be positive"))
	}
	if r := s.RetryLimit; r != nil && (*r < 0 || *r > 100) {
		errs = append(errs, field.Invalid(fld.Child("retryLimit"), *r, "must be between 0 and 100"))
	}
	if o := s.OnFailure; o != nil {
		if o.Volume != VolumeRetain && o.Volume != VolumeRelease {
			errs = append(errs, field.NotSupported(fld.Child("onFailure", "volume"), o.Volume, []string{string(VolumeRetain), string(VolumeRelease)}))
		}
		if o.RetainFor != nil && o.Volume != VolumeRetain {
			errs = append(errs, field.Invalid(fld.Child("onFailure", "retainFor"), o.RetainFor.Duration.String(), "onFailure.retainFor is only allowed with volume: Retain"))
		}
	}
	return errs
}

// ValidateFileURLs refuses file:// stage URLs. They name a directory of the
// node the stage step runs on (a hostPath in all but name, which the
// defer pod cannot even mount): only a cluster that says so accepts them,
// with kdefer-controller --allow-file-urls (and `kdefer render/lint
// --allow-file-urls` to match). Admission applies it to DeferPolicies and to
// effective policies alike, unless allowed.
func ValidateFileURLs(s *DeferPolicySpec, fld *field.Path) field.ErrorList {
	const msg = "file:// URLs write to the node's filesystem and are allowed only when kdefer-controller runs with --allow-file-urls; fix: use s3://, gs:// or azblob://"
	var errs field.ErrorList
	if s.StageOut != nil && strings.HasPrefix(s.StageOut.URL, "file://") {
		errs = append(errs, field.Forbidden(fld.Child("stageOut", "url"), msg))
	}
	for i, r := range s.TriggerRules {
		if strings.HasPrefix(r.URL, "file://") {
			errs = append(errs, field.Forbidden(fld.Child("triggerRules").Index(i).Child("url"), msg))
		}
	}
	for i, in := range s.StageIn {
		if strings.HasPrefix(in.URL, "file://") {
			errs = append(errs, field.Forbidden(fld.Child("stageIn").Index(i).Child("url"), msg))
		}
	}
	return errs
}

// validateRuleURL checks a trigger rule's url as stageOut.url is checked,
// and that it has something to replace: a rule that skips its triggers
// uploads nothing, and a policy without stageOut has no stage-out step.
func validateRuleURL(s *DeferPolicySpec, r TriggerRule, p *field.Path) field.ErrorList {
	if r.URL == "" {
		return nil
	}
	switch {
	case s.StageOut == nil:
		return field.ErrorList{field.Invalid(p, r.URL, "replaces stageOut.url for the rule's triggers, but the policy has no stageOut: set spec.stageOut.url too, or remove the rule's url")}
	case r.Action == TriggerActionSkip:
		return field.ErrorList{field.Invalid(p, r.URL, "the rule's action is Skip, so nothing is uploaded for its triggers: remove the url, or the action")}
	}
	if msg := CheckStageURL(r.URL, false); msg != "" {
		return field.ErrorList{field.Invalid(p, r.URL, msg)}
	}
	return nil
}

func validateGlobs(globs []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, g := range globs {
		if msg := CheckGlob(g); msg != "" {
			errs = append(errs, field.Invalid(p.Index(i), g, msg))
		}
	}
	return errs
}

func triggerStrings() []string {
	out := make([]string, len(AllTriggers))
	for i, t := range AllTriggers {
		out[i] = string(t)
	}
	return out
}
