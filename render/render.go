// Package render is the one place that knows how kdefer changes a Job's pod
// template: it adds the pod finalizer and identifying labels, turns the work
// volume into a generic ephemeral volume (labelled, so the admission policy
// can guard its PVC), injects stage-in init containers that alone hold the
// credentials, and copies the Job's kdefer.io annotations onto the template
// so a pod alone carries its configuration. Everything else is left alone.
//
// Render is a pure function of its inputs: the webhook, the CLI and the
// tests call it, and rendering a rendered Job changes nothing. It must not
// read or write the cluster, keep state, or import controller or cmd; what
// the stage steps expect of the pod (environment) is stagecontract's.
package render

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/internal/version"
)

const (
	// StageInContainerName is the name of the stage-in init container, or
	// the prefix of their names ("kdefer-stage-in-0", ...) when there are
	// several; a name kdefer reserves (v1.StageInContainerName).
	StageInContainerName = v1.StageInContainerName
	// StageMountPath is where kdefer's stage steps (the stage-in init
	// containers, the defer pod's stage-out) mount the work volume,
	// whatever the Job's mount path: a path of kdefer's, neither inside
	// nor around its other mounts (/tmp, the CA bundle and token under
	// /var/run) or a directory the steps trust (/etc/ssl/certs). The
	// steps resolve their directories beneath it (kdefer-stage
	// --volume-root).
	StageMountPath = "/kdefer-work"
	// JobCompletionIndexAnnotation is set by the Job controller on the pods
	// of Indexed Jobs.
	JobCompletionIndexAnnotation = "batch.kubernetes.io/job-completion-index"
	// JobNameLabel is set by the Job controller on every pod of a Job.
	JobNameLabel = "batch.kubernetes.io/job-name"
)

// Options are the cluster-wide settings of render.
type Options struct {
	// StageImage runs kdefer-stage (default v1alpha1.DefaultStageImage()).
	StageImage string
	// ImagePullPolicy of the stage-in containers (default IfNotPresent).
	ImagePullPolicy corev1.PullPolicy
	// AllowFileURLs accepts file:// stage URLs (kdefer-controller
	// --allow-file-urls); see v1alpha1.ValidateFileURLs.
	AllowFileURLs bool
}

func (o Options) withDefaults() Options {
	if o.StageImage == "" {
		o.StageImage = v1.DefaultStageImage()
	}
	if o.ImagePullPolicy == "" {
		o.ImagePullPolicy = corev1.PullIfNotPresent
	}
	return o
}

// TemplateError is a problem with the pod template that render cannot
// honour: where it is, what is wrong, and the fix.
type TemplateError struct {
	Field, Problem, Fix string
}

func (e *TemplateError) Error() string {
	s := e.Field + ": " + e.Problem
	if e.Fix != "" {
		s += "; fix: " + e.Fix
	}
	return s
}

// Job returns a rendered copy of job. policy is the spec of the DeferPolicy
// the Job names with kdefer.io/policy (nil when it names none; the caller
// looks it up). The error lists every problem found (see Problems).
func Job(job *batchv1.Job, policy *v1.DeferPolicySpec, opts Options) (*batchv1.Job, error) {
	out := job.DeepCopy()
	var errs []error
	if err := PodTemplate(job.Annotations, &out.Spec.Template, policy, opts); err != nil {
		errs = append(errs, err)
	}
	indexed := job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion
	errs = append(errs, ownerPlaceholders(mergedConfig(job.Annotations, job.Spec.Template.Annotations), jobOwner(indexed))...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// IsRendered reports whether job is what rendering it yields, and if not,
// why (render's error, or the first difference).
func IsRendered(job *batchv1.Job, policy *v1.DeferPolicySpec, opts Options) (bool, string) {
	r, err := Job(job, policy, opts)
	if err != nil {
		return false, err.Error()
	}
	if !equality.Semantic.DeepEqual(r.Spec.Template, job.Spec.Template) {
		return false, "the pod template differs from its rendered form (was the kdefer mutating webhook skipped, or did a later webhook undo its changes?)"
	}
	return true, ""
}

// Warnings returns advice about a Job that render accepts: unknown kdefer.io
// annotations (likely typos) and a stage-out URL that more than one pod
// attempt expands to (v1.StageOutCollision): even a one-pod Job retries a
// failed pod (backoffLimit, 6 by default) under a new name. A DeferPolicy's
// own URL is warned about when the policy is admitted.
func Warnings(job *batchv1.Job) []string {
	ann := mergedConfig(job.Annotations, job.Spec.Template.Annotations)
	w := v1.UnknownAnnotations(job.Annotations)
	w = append(w, v1.UnknownAnnotations(job.Spec.Template.Annotations)...)
	if u := ann[v1.AnnotationStageOut]; u != "" {
		if c := v1.StageOutCollision(u); c != "" {
			w = append(w, fmt.Sprintf("annotation %s: %s", v1.AnnotationStageOut, c))
		}
	}
	return w
}

// PolicyWarnings returns advice about a DeferPolicy that admission
// accepts (the webhook and `kdefer lint` print the same): a stage-out URL
// every attempt of a pod shares, unless the policy overwrites on purpose.
// A trigger rule's url used for Succeeded alone is not warned about: only
// one attempt of a one-completion Job (of an index, with {index}) ends
// Succeeded, so such a url is the stable prefix a later Job stages in
// from (usage.md, Pipelines); a re-run of the Job is still refused there.
func PolicyWarnings(p *v1.DeferPolicySpec) []string {
	so := p.StageOut
	if so == nil || so.Overwrite {
		return nil
	}
	var w []string
	if c := v1.StageOutCollision(so.URL); c != "" {
		w = append(w, "spec.stageOut.url: "+c)
	}
	for i, r := range p.TriggerRules {
		if r.URL == "" || slices.Equal(r.Triggers, []v1.Trigger{v1.TriggerSucceeded}) {
			continue
		}
		if c := v1.StageOutCollision(r.URL); c != "" {
			w = append(w, fmt.Sprintf("spec.triggerRules[%d].url: %s", i, c))
		}
	}
	return w
}

// Problems flattens an error from render (or EffectivePolicy) into one
// message per problem.
func Problems(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	var walk func(error)
	walk = func(e error) {
		if te, ok := e.(*TemplateError); ok {
			out = append(out, te.Error())
			return
		}
		if ae, ok := e.(*v1.AnnotationError); ok {
			out = append(out, ae.Error())
			return
		}
		if m, ok := e.(interface{ Unwrap() []error }); ok {
			for _, c := range m.Unwrap() {
				walk(c)
			}
			return
		}
		out = append(out, e.Error())
	}
	walk(err)
	return out
}

// mergedConfig returns the kdefer.io configuration annotations of the pod
// template overlaid by the Job's (the Job's win).
func mergedConfig(jobAnn, tmplAnn map[string]string) map[string]string {
	out := map[string]string{}
	for _, src := range []map[string]string{tmplAnn, jobAnn} {
		for _, k := range v1.ConfigAnnotations {
			if v, ok := src[k]; ok {
				out[k] = v
			}
		}
	}
	return out
}

// PodTemplate renders tmpl in place. ownerAnnotations are the annotations of
// the object that holds the template (the Job); they override the
// template's own kdefer.io annotations.
func PodTemplate(ownerAnnotations map[string]string, tmpl *corev1.PodTemplateSpec, policy *v1.DeferPolicySpec, opts Options) error {
	return podTemplate(ownerAnnotations, tmpl, policy, opts, "spec.template.spec")
}

// podTemplate renders tmpl; specPath is where its spec is in the object the
// user wrote (a Job's template, or a pod), for the errors.
func podTemplate(ownerAnnotations map[string]string, tmpl *corev1.PodTemplateSpec, policy *v1.DeferPolicySpec, opts Options, specPath string) error {
	opts = opts.withDefaults()
	ann := mergedConfig(ownerAnnotations, tmpl.Annotations)
	pol, perr := EffectivePolicy(policy, ann)
	var errs []error
	if perr != nil {
		errs = append(errs, perr)
	}
	errs = append(errs, clusterRules(&pol, opts)...)
	fail := func(field, problem, fix string) {
		errs = append(errs, &TemplateError{Field: field, Problem: problem, Fix: fix})
	}
	spec := &tmpl.Spec
	wv := pol.WorkVolume
	// Whether render says it rendered the template before; see reserved.go
	// for why that alone grants nothing.
	rendered := tmpl.Annotations[v1.AnnotationRendered] != ""
	errs = append(errs, checkReserved(spec, specPath, rendered)...)
	// The apiserver refuses a container without an image too, but only
	// after this, with a message about the rendered Job; `kdefer lint`
	// has no apiserver and would call the Job ok.
	for _, cs := range []struct {
		field string
		list  []corev1.Container
	}{{"containers", spec.Containers}, {"initContainers", spec.InitContainers}} {
		for i, c := range cs.list {
			if strings.TrimSpace(c.Image) == "" {
				fail(fmt.Sprintf("spec.template.spec.%s[%d] (%s).image", cs.field, i, c.Name), "is not set", "name the container's image, e.g. image: busybox:1.36")
			}
		}
	}
	// Credentials: no container of the user's may see the Secret.
	if pol.Credentials != nil {
		errs = append(errs, checkCredentials(spec, pol.Credentials.Name, specPath, rendered)...)
	}

	// The work volume.
	idx := -1
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == wv.Name {
			idx = i
		}
	}
	volField := fmt.Sprintf("volume %q (%s)", wv.Name, v1.AnnotationWorkVolume)
	_, nameInAnn := ann[v1.AnnotationWorkVolume]
	_, mountInAnn := ann[v1.AnnotationWorkMountPath]
	nameExplicit := nameInAnn || (policy != nil && policy.WorkVolume.Name != "")
	mountExplicit := mountInAnn || (policy != nil && policy.WorkVolume.MountPath != "")
	switch {
	case idx < 0 && nameExplicit && !mountExplicit:
		// Most likely a misspelt emptyDir: creating a new volume would
		// silently stage out an empty one.
		var have []string
		for _, v := range spec.Volumes {
			if v.EmptyDir != nil {
				have = append(have, v.Name)
			}
		}
		fix := fmt.Sprintf("name an existing emptyDir volume (the template has: %s), or set %s too to create a new volume there", strings.Join(have, ", "), v1.AnnotationWorkMountPath)
		if len(have) == 0 {
			fix = fmt.Sprintf("the template has no emptyDir volume: set %s too to create a new work volume there", v1.AnnotationWorkMountPath)
		}
		fail(volField, "does not exist in the pod template", fix)
	case idx < 0:
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: wv.Name, VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: claimTemplate(pol, nil)},
		}})
		for i := range spec.Containers {
			c := &spec.Containers[i]
			if mountsVolume(c, wv.Name) {
				continue
			}
			if other := mountAt(c, wv.MountPath); other != "" {
				fail(fmt.Sprintf("%s.containers[%d] (%s)", specPath, i, c.Name),
					fmt.Sprintf("already mounts volume %q at %s, where kdefer would mount the new work volume %q", other, wv.MountPath, wv.Name),
					fmt.Sprintf("set %s to another path, or set %s: %s to make that volume the work volume", v1.AnnotationWorkMountPath, v1.AnnotationWorkVolume, other))
				continue
			}
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: wv.Name, MountPath: wv.MountPath})
		}
	case spec.Volumes[idx].EmptyDir != nil:
		ed := spec.Volumes[idx].EmptyDir
		if ed.Medium == corev1.StorageMediumMemory {
			fail(volField, "is a memory-backed emptyDir, whose contents cannot outlive the pod",
				"remove medium: Memory from the volume, or point "+v1.AnnotationWorkVolume+" at another volume")
			break
		}
		spec.Volumes[idx].VolumeSource = corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: claimTemplate(pol, sizeFromEmptyDir(policy, ann, ed))},
		}
	case spec.Volumes[idx].Ephemeral != nil:
		e := spec.Volumes[idx].Ephemeral
		if e.VolumeClaimTemplate == nil {
			fail(volField, "is an ephemeral volume without a volumeClaimTemplate", "add a volumeClaimTemplate or remove the volume")
			break
		}
		if e.VolumeClaimTemplate.Labels == nil {
			e.VolumeClaimTemplate.Labels = map[string]string{}
		}
		e.VolumeClaimTemplate.Labels[v1.LabelWorkVolume] = wv.Name
	default:
		fail(volField, fmt.Sprintf("is a %s volume; kdefer can only retain an emptyDir (which it converts) or a generic ephemeral volume", volumeKind(&spec.Volumes[idx])),
			fmt.Sprintf("point %s at an emptyDir volume, or at a name no volume has (kdefer then creates one mounted at %s)", v1.AnnotationWorkVolume, wv.MountPath))
	}

	// Stage-in init containers, first, replacing any rendered before (and
	// dropping those the policy no longer has). A container rendered before
	// keeps the fields render does not own, so that the apiserver's
	// defaults (terminationMessagePath, ...) do not make a rendered Job
	// look unrendered.
	prev := map[string]corev1.Container{}
	for _, c := range spec.InitContainers {
		if ownStageIn(rendered, &c) {
			prev[c.Name] = c
		}
	}
	var initc []corev1.Container
	for i, in := range pol.StageIn {
		name := StageInContainerName
		if len(pol.StageIn) > 1 {
			name = fmt.Sprintf("%s-%d", StageInContainerName, i)
		}
		want := stageInContainer(name, in, pol, opts)
		if old, ok := prev[name]; ok {
			want = ownFields(old, want)
		}
		initc = append(initc, want)
	}
	for _, c := range spec.InitContainers {
		if !ownStageIn(rendered, &c) {
			initc = append(initc, c)
		}
	}
	if len(initc) == 0 {
		// Keep nil vs empty as it was; never the old list, which may
		// hold stage-in containers the policy no longer has.
		initc = spec.InitContainers[:0]
	}
	spec.InitContainers = initc
	spec.Volumes = withS3CABundle(spec.Volumes, &pol)
	spec.Volumes = withWebIdentity(spec.Volumes, &pol)
	withIdentity(spec, &pol)

	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	// Identity: label, finalizer, configuration, render version.
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[v1.LabelManaged] = "true"
	if !slices.Contains(tmpl.Finalizers, v1.PodFinalizer) {
		tmpl.Finalizers = append(tmpl.Finalizers, v1.PodFinalizer)
	}
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	for k, v := range ann {
		tmpl.Annotations[k] = v
	}
	tmpl.Annotations[v1.AnnotationRendered] = version.Version
	return nil
}
