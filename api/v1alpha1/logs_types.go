package v1alpha1

import "k8s.io/apimachinery/pkg/api/resource"

// DefaultLogsMaxBytes caps each archived container log (one attempt of one
// container) unless stageOut.logs.maxBytes says otherwise: a longer log keeps
// its head, where a pod says what it was doing, and its tail, where it says
// why it ended.
const DefaultLogsMaxBytes = "10Mi"

// maxLogsMaxBytes bounds stageOut.logs.maxBytes: the stage step holds one
// log at a time in memory, under its 256Mi limit.
var maxLogsMaxBytes = resource.MustParse("100Mi")

// StageOutLogs configures the archive of the ended pod's container logs.
type StageOutLogs struct {
	// enabled archives the logs (default true). Each container's current
	// log and, when it restarted, its previous attempt's are stored under
	// PREFIX/_kdefer/logs/POD/CONTAINER.log and CONTAINER.previous.log.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// maxBytes caps each archived log (default 10Mi, at most 100Mi); a
	// longer log keeps its first maxBytes/4 bytes and its last
	// maxBytes-maxBytes/4, stored with a marker line between them, and its
	// manifest entry records the cut (truncated: originalSize, headBytes,
	// tailBytes).
	// +optional
	MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`
}

// LogsEnabled says whether a stage-out archives the ended pod's logs.
func (s *StageOut) LogsEnabled() bool {
	return s != nil && s.URL != "" && (s.Logs == nil || s.Logs.Enabled == nil || *s.Logs.Enabled)
}

// LogsMaxBytes is the cap of each archived log.
func (s *StageOut) LogsMaxBytes() int64 {
	if s != nil && s.Logs != nil && s.Logs.MaxBytes != nil && s.Logs.MaxBytes.Value() > 0 {
		return s.Logs.MaxBytes.Value()
	}
	q := resource.MustParse(DefaultLogsMaxBytes)
	return q.Value()
}
