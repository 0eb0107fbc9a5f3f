package controller

import (
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
)

// LogsEndpoint is where stage-out steps fetch the ended pod's logs
// (logsendpoint.Server: the node agent, or the controller's kdefer-logs
// Service).
type LogsEndpoint struct {
	// URL of the endpoint ("": logs are never archived, whatever the
	// policies say: the webhook server is off). It may name the defer
	// pod's node address as $(KDEFER_NODE_IP) (NodeAgentURL).
	URL string
	// ServerName is the name the endpoint's certificate is checked for
	// ("": the URL's host): the node agent's, reached at a node address.
	ServerName string
	// CA returns the PEM bundle that signs the endpoint's certificate, read
	// when a defer pod is built so a rotated CA reaches new pods; nil or
	// empty: logs are not archived.
	CA func() []byte
}

// nodeIPRef is how a LogsEndpoint URL names the defer pod's node address.
const nodeIPRef = "$(" + stagecontract.EnvNodeIP + ")"

// NodeAgentURL is the URL of the node agent's logs endpoint on port, on
// whichever node the defer pod runs (always the ended pod's).
func NodeAgentURL(port int) string {
	return "https://" + nodeIPRef + ":" + strconv.Itoa(port) + stagecontract.LogsPath
}

// logsTokenSeconds is the token's lifetime, the least the apiserver
// allows; the kubelet renews it at 80%.
const logsTokenSeconds int64 = 600

// withLogs gives the stage-out step c what it needs to archive the ended
// pod's logs, when the policy wants them and the endpoint is known: the
// endpoint, its CA and the cap in the environment, and a token bound to
// the defer pod for stagecontract.LogsAudience, which the apiserver refuses
// (its audience is not the apiserver's) and the endpoint accepts for this
// run's ended pod only. A step that mounts the token's volume needs
// logsVolume in its pod. The step also archives its own log, as the
// container c of deferPod.
func withLogs(c *corev1.Container, so *v1.StageOut, ep LogsEndpoint, deferPod string) {
	if !so.LogsEnabled() || ep.URL == "" || ep.CA == nil {
		return
	}
	ca := ep.CA()
	if len(ca) == 0 {
		return
	}
	if strings.Contains(ep.URL, nodeIPRef) {
		// Before the URL: Kubernetes expands $(VAR) from earlier variables only.
		c.Env = append(c.Env, corev1.EnvVar{Name: stagecontract.EnvNodeIP,
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}})
	}
	if ep.ServerName != "" {
		c.Env = append(c.Env, corev1.EnvVar{Name: stagecontract.EnvLogsServerName, Value: ep.ServerName})
	}
	c.Env = append(c.Env,
		corev1.EnvVar{Name: stagecontract.EnvLogsURL, Value: ep.URL},
		corev1.EnvVar{Name: stagecontract.EnvLogsCA, Value: string(ca)},
		corev1.EnvVar{Name: stagecontract.EnvLogsMaxBytes, Value: strconv.FormatInt(so.LogsMaxBytes(), 10)},
		corev1.EnvVar{Name: stagecontract.EnvLogsSelf, Value: deferPod + "/" + c.Name})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v1.LogsTokenVolume, MountPath: path.Dir(stagecontract.LogsTokenPath), ReadOnly: true})
}

// logsVolume is the projected token of the stage-out step (withLogs).
func logsVolume() corev1.Volume {
	return corev1.Volume{Name: v1.LogsTokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: stagecontract.LogsAudience, ExpirationSeconds: ptr.To(logsTokenSeconds), Path: path.Base(stagecontract.LogsTokenPath),
		}}},
		// The default mode (0644): the stage step may run as the ended
		// pod's user, not the pod's, and no other step mounts the volume.
	}}}
}

// logsSidecar is the stage-logs container of a defer pod whose stage-out
// step (stage) archives logs and is followed by defer containers: a native
// sidecar (an init container that restarts Always), started after the
// stage-out step, that the kubelet stops, with SIGTERM, only once the last
// defer container has ended (the pod's phase waits for it). It then asks
// the logs endpoint for the defer containers' logs, every attempt, stores
// them under the prefix's _kdefer/logs/DEFERPOD/ and lists them in
// stagecontract.StepLogsKey. It has what the stage-out step has for that
// (the endpoint, the token, the store's credentials, web identity token
// and CA), and no work
// volume: the defer containers, the tenant's code, never mount the token.
func logsSidecar(stage *corev1.Container) corev1.Container {
	c := *stage.DeepCopy()
	c.Name = v1.StageLogsName
	to := ""
	for i, a := range stage.Args {
		if a == "--to" && i+1 < len(stage.Args) {
			to = stage.Args[i+1]
		}
	}
	c.Args = []string{"logs", "--to", to, "--log-format", "json"}
	c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	for i := range c.Env {
		if e := &c.Env[i]; e.Name == stagecontract.EnvLogsSelf {
			// Its own log too, and the defer pod it archives for.
			pod, _, _ := strings.Cut(e.Value, "/")
			e.Value = pod + "/" + c.Name
		} else if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			e.ValueFrom.ResourceFieldRef.ContainerName = c.Name
		}
	}
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name != v1.LogsTokenVolume && m.Name != v1.S3CABundleVolume && m.Name != v1.WebIdentityVolume
	})
	return c
}
