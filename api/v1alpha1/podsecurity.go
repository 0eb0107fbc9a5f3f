package v1alpha1

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Defer pods meet the Pod Security Standard "restricted": they run on the
// dead pod's node with nodeName and tolerate its NoExecute taints, so a
// defer container that could escape to the node would get there wherever
// the Job ran. kdefer fills in what a defer container leaves unset
// (non-root, no privilege escalation, every capability dropped, seccomp
// RuntimeDefault); admission refuses what would weaken it, each field named
// with its fix. Host namespaces, hostPath volumes and sysctls are pod
// fields, which a DeferPolicy cannot set.

// CapabilityAllowed is the one capability "restricted" lets a container
// add back after dropping ALL.
const CapabilityAllowed corev1.Capability = "NET_BIND_SERVICE"

// SELinuxTypeAllowed says whether Pod Security "baseline" (and so
// "restricted") allows a container's SELinux type ("" is the runtime's).
func SELinuxTypeAllowed(t string) bool {
	switch t {
	case "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t":
		return true
	}
	return false
}

// validateDeferContainerSecurity refuses a defer container that would
// weaken the defer pod's Pod Security, or read the stage credentials.
func validateDeferContainerSecurity(c *corev1.Container, creds *corev1.LocalObjectReference, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	forbid := func(f *field.Path, problem, fix string) {
		errs = append(errs, field.Forbidden(f, fmt.Sprintf("%s: defer pods meet the Pod Security Standard restricted; fix: %s", problem, fix)))
	}
	for i, port := range c.Ports {
		if port.HostPort != 0 {
			forbid(p.Child("ports").Index(i).Child("hostPort"), "a host port binds the node's network", "remove hostPort")
		}
	}
	if creds != nil && creds.Name != "" {
		fix := fmt.Sprintf("give the defer container a Secret of its own; the stage credentials (%s) go only to kdefer's stage steps", creds.Name)
		for i, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == creds.Name {
				errs = append(errs, field.Forbidden(p.Child("env").Index(i).Child("valueFrom", "secretKeyRef"),
					fmt.Sprintf("reads the stage credentials Secret %q; fix: %s", creds.Name, fix)))
			}
		}
		for i, e := range c.EnvFrom {
			if e.SecretRef != nil && e.SecretRef.Name == creds.Name {
				errs = append(errs, field.Forbidden(p.Child("envFrom").Index(i).Child("secretRef"),
					fmt.Sprintf("reads the stage credentials Secret %q; fix: %s", creds.Name, fix)))
			}
		}
	}
	sc := c.SecurityContext
	if sc == nil {
		return errs
	}
	p = p.Child("securityContext")
	if sc.Privileged != nil && *sc.Privileged {
		forbid(p.Child("privileged"), "a privileged container owns the node", "remove privileged")
	}
	if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation {
		forbid(p.Child("allowPrivilegeEscalation"), "privilege escalation is not allowed", "remove allowPrivilegeEscalation (kdefer sets false)")
	}
	if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot {
		forbid(p.Child("runAsNonRoot"), "defer containers never run as root", "remove runAsNonRoot (kdefer sets true)")
	}
	if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		forbid(p.Child("runAsUser"), "defer containers never run as root", "remove runAsUser (defer containers run as 65532) or set a non-zero UID")
	}
	if caps := sc.Capabilities; caps != nil {
		for i, c := range caps.Add {
			if c != CapabilityAllowed {
				forbid(p.Child("capabilities", "add").Index(i), fmt.Sprintf("capability %s cannot be added", c),
					fmt.Sprintf("remove it (kdefer drops ALL; only %s may be added back)", CapabilityAllowed))
			}
		}
	}
	if sp := sc.SeccompProfile; sp != nil && sp.Type == corev1.SeccompProfileTypeUnconfined {
		forbid(p.Child("seccompProfile", "type"), "an unconfined seccomp profile is not allowed", "remove seccompProfile (kdefer sets RuntimeDefault) or use Localhost")
	}
	if ap := sc.AppArmorProfile; ap != nil && ap.Type == corev1.AppArmorProfileTypeUnconfined {
		forbid(p.Child("appArmorProfile", "type"), "an unconfined AppArmor profile is not allowed", "remove appArmorProfile or use RuntimeDefault or Localhost")
	}
	if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
		forbid(p.Child("procMount"), "an unmasked /proc is not allowed", "remove procMount")
	}
	if se := sc.SELinuxOptions; se != nil {
		if !SELinuxTypeAllowed(se.Type) {
			forbid(p.Child("seLinuxOptions", "type"), fmt.Sprintf("SELinux type %q is not allowed", se.Type), "remove it, or use container_t, container_init_t, container_kvm_t or container_engine_t")
		}
		if se.User != "" {
			forbid(p.Child("seLinuxOptions", "user"), "a custom SELinux user is not allowed", "remove seLinuxOptions.user")
		}
		if se.Role != "" {
			forbid(p.Child("seLinuxOptions", "role"), "a custom SELinux role is not allowed", "remove seLinuxOptions.role")
		}
	}
	if w := sc.WindowsOptions; w != nil && w.HostProcess != nil && *w.HostProcess {
		forbid(p.Child("windowsOptions", "hostProcess"), "a host process is not allowed", "remove hostProcess")
	}
	return errs
}
