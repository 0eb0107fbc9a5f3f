package render

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// kdefer's own containers and volumes in a template, and the user's that
// borrow their names (v1alpha1's reserved.go).
//
// A template is the user's: anyone may write an init container named
// kdefer-stage-in, or the kdefer.io/rendered annotation. So a name alone
// never makes a container kdefer's. In a template without the annotation,
// every reserved name is refused. In one with it, render takes the
// stage-in containers and the CA bundle and web identity volumes for its
// own earlier output, and rebuilds them from the policy (or drops them):
// whatever a forger put there, what runs with the credentials is kdefer's
// image and command (ownFields).

// ownStageIn reports whether c, an init container of a template render
// marked rendered, is one render made: it is rebuilt or dropped, never
// kept as written.
func ownStageIn(rendered bool, c *corev1.Container) bool {
	return rendered && v1.IsStageInContainer(c.Name)
}

// checkReserved refuses the user's containers and volumes of spec that
// use kdefer's names, each error naming the field under specPath and the
// fix.
func checkReserved(spec *corev1.PodSpec, specPath string, rendered bool) []error {
	p := field.NewPath(specPath)
	var errs field.ErrorList
	for i, v := range spec.Volumes {
		if rendered && (v.Name == v1.S3CABundleVolume || v.Name == v1.WebIdentityVolume) {
			continue // render's own, replaced by withS3CABundle and withWebIdentity
		}
		errs = append(errs, v1.ValidateVolumeName(v.Name, p.Child("volumes").Index(i).Child("name"))...)
	}
	check := func(cp *field.Path, c *corev1.Container) {
		errs = append(errs, v1.ValidateTemplateContainerName(c.Name, cp.Child("name"))...)
		errs = append(errs, v1.ValidateVolumeMounts(c.VolumeMounts, cp.Child("volumeMounts"))...)
	}
	for i := range spec.Containers {
		check(p.Child("containers").Index(i), &spec.Containers[i])
	}
	for i := range spec.InitContainers {
		if !ownStageIn(rendered, &spec.InitContainers[i]) {
			check(p.Child("initContainers").Index(i), &spec.InitContainers[i])
		}
	}
	for i := range spec.EphemeralContainers {
		c := corev1.Container(spec.EphemeralContainers[i].EphemeralContainerCommon)
		check(p.Child("ephemeralContainers").Index(i), &c)
	}
	return templateErrors(errs)
}

// templateErrors words the api's field errors as render words its own:
// the field, then the problem and its fix (field.Error's detail).
func templateErrors(fes field.ErrorList) []error {
	var errs []error
	for _, e := range fes {
		errs = append(errs, &TemplateError{Field: e.Field, Problem: e.Detail})
	}
	return errs
}
