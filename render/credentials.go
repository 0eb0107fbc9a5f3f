package render

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// checkCredentials refuses a template in which a container of the user's
// (main, init, sidecar or ephemeral) could read the credentials Secret.
// Only the stage-in containers of a template rendered before are render's
// own (ownStageIn): they are rebuilt, so what they hold now does not count.
func checkCredentials(spec *corev1.PodSpec, secret, specPath string, rendered bool) []error {
	var errs []error
	fix := fmt.Sprintf("kdefer gives the Secret named by %s only to its stage steps: give the container a different Secret, or remove the reference", v1.AnnotationCredentials)
	secretVols := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			secretVols[v.Name] = true
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil && s.Secret.Name == secret {
					secretVols[v.Name] = true
				}
			}
		}
	}
	check := func(kind string, i int, c *corev1.Container) {
		where := fmt.Sprintf("%s.%s[%d] (%s)", specPath, kind, i, c.Name)
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil && e.SecretRef.Name == secret {
				errs = append(errs, &TemplateError{Field: where + ".envFrom", Problem: fmt.Sprintf("receives the credentials Secret %q", secret), Fix: fix})
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret {
				errs = append(errs, &TemplateError{Field: where + ".env[" + e.Name + "]", Problem: fmt.Sprintf("reads key %q of the credentials Secret %q", e.ValueFrom.SecretKeyRef.Key, secret), Fix: fix})
			}
		}
		for _, m := range c.VolumeMounts {
			if secretVols[m.Name] {
				errs = append(errs, &TemplateError{Field: where + ".volumeMounts", Problem: fmt.Sprintf("mounts volume %q, which holds the credentials Secret %q", m.Name, secret), Fix: fix})
			}
		}
	}
	for i := range spec.Containers {
		check("containers", i, &spec.Containers[i])
	}
	for i := range spec.InitContainers {
		if !ownStageIn(rendered, &spec.InitContainers[i]) {
			check("initContainers", i, &spec.InitContainers[i])
		}
	}
	for i := range spec.EphemeralContainers {
		c := corev1.Container(spec.EphemeralContainers[i].EphemeralContainerCommon)
		check("ephemeralContainers", i, &c)
	}
	return errs
}
