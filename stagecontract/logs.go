package stagecontract

// The logs contract: how the stage-out step gets the ended pod's container
// logs from kdefer-controller, which may read pods/log, and where it stores
// them. The step runs with no API access; the controller serves the logs
// over HTTPS to the step's projected service-account token, whose audience
// (LogsAudience) makes it useless against the apiserver, and only the logs
// of the pod whose run the token's pod serves.

// LogsDir is the directory, under a stage-out prefix, of the archived logs:
// LogsDir + POD + "/" + CONTAINER + ".log" (".previous.log" for the attempt
// before a restart).
const LogsDir = ReservedDir + "logs/"

// Environment of a stage-out step that archives logs. All three are set, or
// none.
const (
	// EnvLogsURL is the controller's logs endpoint (LogsPath on its webhook
	// server).
	EnvLogsURL = "KDEFER_LOGS_URL"
	// EnvLogsCA is the PEM bundle that signs the endpoint's certificate.
	EnvLogsCA = "KDEFER_LOGS_CA"
	// EnvLogsMaxBytes caps each archived log; a longer log keeps its tail.
	EnvLogsMaxBytes = "KDEFER_LOGS_MAX_BYTES"
)

// LogsAudience is the audience of the token the stage-out step presents;
// the controller's TokenReview asks for exactly this one.
const LogsAudience = "logs.kdefer.io"

// LogsTokenPath is where the stage-out step finds its token.
const LogsTokenPath = "/var/run/secrets/kdefer.io/logs/token"

// LogsPath is the endpoint's path on the controller's webhook server.
// GET LogsPath answers a LogsIndex; GET LogsPath?container=C&previous=B
// streams that log.
const LogsPath = "/kdefer/v1/logs"

// LogsIndex lists the logs the endpoint serves to a token.
type LogsIndex struct {
	// Pod is the ended pod's name.
	Pod string `json:"pod"`
	// Logs are its containers' logs, init containers first.
	Logs []LogRef `json:"logs"`
}

// LogRef names one container attempt's log.
type LogRef struct {
	Container string `json:"container"`
	// Previous is the attempt before the container's last restart.
	Previous bool `json:"previous,omitempty"`
}

// LogKey is the key, relative to the prefix, of one archived log.
func LogKey(pod string, r LogRef) string {
	if r.Previous {
		return LogsDir + pod + "/" + r.Container + ".previous.log"
	}
	return LogsDir + pod + "/" + r.Container + ".log"
}
