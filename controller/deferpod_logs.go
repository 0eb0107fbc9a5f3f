package controller

import (
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/stagecontract"
)

// LogsEndpoint is where stage-out steps fetch the ended pod's logs
// (LogServer behind the webhook Service).
type LogsEndpoint struct {
	// URL of the endpoint ("": logs are never archived, whatever the
	// policies say: the webhook server is off).
	URL string
	// CA returns the PEM bundle that signs the endpoint's certificate, read
	// when a defer pod is built so a rotated CA reaches new pods; nil or
	// empty: logs are not archived.
	CA func() []byte
}

// logsTokenVolume holds the stage-out step's projected token.
const logsTokenVolume = "kdefer-logs-token"

// logsTokenSeconds is the token's lifetime, the least the apiserver
// allows; the kubelet renews it at 80%.
const logsTokenSeconds int64 = 600

// withLogs gives the stage-out step c what it needs to archive the ended
// pod's logs, when the policy wants them and the endpoint is known: the
// endpoint, its CA and the cap in the environment, and a token bound to
// the defer pod for stagecontract.LogsAudience, which the apiserver refuses
// (its audience is not the apiserver's) and LogServer accepts for this
// run's ended pod only. A step that mounts the token's volume needs
// logsVolume in its pod.
func withLogs(c *corev1.Container, so *v1.StageOut, ep LogsEndpoint) {
	if !so.LogsEnabled() || ep.URL == "" || ep.CA == nil {
		return
	}
	ca := ep.CA()
	if len(ca) == 0 {
		return
	}
	c.Env = append(c.Env,
		corev1.EnvVar{Name: stagecontract.EnvLogsURL, Value: ep.URL},
		corev1.EnvVar{Name: stagecontract.EnvLogsCA, Value: string(ca)},
		corev1.EnvVar{Name: stagecontract.EnvLogsMaxBytes, Value: strconv.FormatInt(so.LogsMaxBytes(), 10)})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: logsTokenVolume, MountPath: path.Dir(stagecontract.LogsTokenPath), ReadOnly: true})
}

// logsVolume is the projected token of the stage-out step (withLogs).
func logsVolume() corev1.Volume {
	return corev1.Volume{Name: logsTokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: stagecontract.LogsAudience, ExpirationSeconds: ptr.To(logsTokenSeconds), Path: path.Base(stagecontract.LogsTokenPath),
		}}},
		// The default mode (0644): the stage step may run as the ended
		// pod's user, not the pod's, and no other step mounts the volume.
	}}}
}
