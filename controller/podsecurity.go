package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// Every pod kdefer builds meets the Pod Security Standard "restricted", so
// it is admitted in a namespace that enforces it, and a defer container,
// which runs on the dead pod's node with nodeName, cannot reach the node.
// Admission refuses policies that weaken it (v1alpha1's podsecurity.go,
// with a message naming the field); the builder still enforces it, for a
// policy stored before that rule or a DeferRun written by hand.

// restricted returns a step's security context: what the container sets,
// with every "restricted" requirement enforced (non-root, no privilege
// escalation, every capability dropped but NET_BIND_SERVICE, a confined
// seccomp profile; nothing privileged, unmasked, unconfined or a host
// process) and a read-only root filesystem unless it asks otherwise.
func restricted(sc *corev1.SecurityContext) *corev1.SecurityContext {
	if sc == nil {
		sc = &corev1.SecurityContext{}
	} else {
		sc = sc.DeepCopy()
	}
	if sc.ReadOnlyRootFilesystem == nil {
		sc.ReadOnlyRootFilesystem = ptr.To(true)
	}
	sc.Privileged = nil
	sc.AllowPrivilegeEscalation = ptr.To(false)
	sc.RunAsNonRoot = ptr.To(true)
	if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		sc.RunAsUser = nil // the pod's, 65532
	}
	if sc.Capabilities == nil {
		sc.Capabilities = &corev1.Capabilities{}
	}
	sc.Capabilities.Add = slices.DeleteFunc(sc.Capabilities.Add, func(c corev1.Capability) bool { return c != v1.CapabilityAllowed })
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		sc.Capabilities.Drop = append(sc.Capabilities.Drop, "ALL")
	}
	if sp := sc.SeccompProfile; sp == nil || (sp.Type != corev1.SeccompProfileTypeRuntimeDefault && sp.Type != corev1.SeccompProfileTypeLocalhost) {
		sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	if ap := sc.AppArmorProfile; ap != nil && ap.Type == corev1.AppArmorProfileTypeUnconfined {
		sc.AppArmorProfile = nil
	}
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		sc.ProcMount = nil
	}
	if se := sc.SELinuxOptions; se != nil && (!v1.SELinuxTypeAllowed(se.Type) || se.User != "" || se.Role != "") {
		sc.SELinuxOptions = nil
	}
	if w := sc.WindowsOptions; w != nil {
		w.HostProcess = nil
	}
	return sc
}

// withoutSecret drops the env entries that read the stage credentials
// Secret: only kdefer's stage steps receive it.
func withoutSecret(env []corev1.EnvVar, creds *corev1.LocalObjectReference) []corev1.EnvVar {
	if creds == nil || creds.Name == "" {
		return env
	}
	return slices.DeleteFunc(slices.Clone(env), func(e corev1.EnvVar) bool {
		return e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == creds.Name
	})
}

// withoutHostPorts drops host ports, which bind the node's network.
func withoutHostPorts(ports []corev1.ContainerPort) []corev1.ContainerPort {
	out := slices.Clone(ports)
	for i := range out {
		out[i].HostPort = 0
	}
	return out
}
