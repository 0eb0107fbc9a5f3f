package stagecontract

import "fmt"

// The logs contract: how the stage-out step gets the ended pod's container
// logs, and where it stores them. The step runs with no API access; the
// logs endpoint (kdefer's node agent on the step's own node, or
// kdefer-controller where no agent runs) serves them over HTTPS to the
// step's projected service-account token, whose audience (LogsAudience)
// makes it useless against the apiserver, and only the logs of the pod
// whose run the token's pod serves.

// LogsDir is the directory, under a stage-out prefix, of the archived logs:
// LogsDir + POD + "/" + CONTAINER + ".log" (".previous.log" for the attempt
// before a restart).
const LogsDir = ReservedDir + "logs/"

// Environment of a stage-out step that archives logs. All three are set, or
// none.
const (
	// EnvLogsURL is the logs endpoint (LogsPath): the node agent's, on
	// the node's address (EnvNodeIP), or the controller's.
	EnvLogsURL = "KDEFER_LOGS_URL"
	// EnvLogsServerName, when set, is the name the endpoint's certificate
	// must have (the node agent's, reached by the node's address).
	EnvLogsServerName = "KDEFER_LOGS_SERVER_NAME"
	// EnvNodeIP is the node's address (status.hostIP), which EnvLogsURL
	// may name as $(KDEFER_NODE_IP).
	EnvNodeIP = "KDEFER_NODE_IP"
	// EnvLogsCA is the PEM bundle that signs the endpoint's certificate.
	EnvLogsCA = "KDEFER_LOGS_CA"
	// EnvLogsMaxBytes caps each archived log; a longer log keeps its
	// head and its tail, and says so (LogTruncation).
	EnvLogsMaxBytes = "KDEFER_LOGS_MAX_BYTES"
	// EnvLogsSelf is "POD/CONTAINER", the defer pod and stage step whose
	// own log the step archives with the ended pod's (LogKey(POD,
	// CONTAINER)), so the stage step's log outlives its pod too.
	EnvLogsSelf = "KDEFER_LOGS_SELF"
)

// LogsAudience is the audience of the token the stage-out step presents;
// the controller's TokenReview asks for exactly this one.
const LogsAudience = "logs.kdefer.io"

// LogsTokenPath is where the stage-out step finds its token.
const LogsTokenPath = "/var/run/secrets/kdefer.io/logs/token"

// LogsPath is the endpoint's path on the node agent and on the
// controller's logs server.
// GET LogsPath answers a LogsIndex; GET LogsPath?container=C&previous=B
// streams that log. With LogsStepsParam=true both are about the bearer's
// own defer pod instead: the logs of its defer containers (not its stage
// steps), for the stage-logs sidecar.
const LogsPath = "/kdefer/v1/logs"

// LogsStepsParam is the query parameter that asks for the defer pod's
// own steps' logs.
const LogsStepsParam = "steps"

// StepLogsKey is the key, relative to the prefix, of the object that
// lists the defer containers' logs of defer pod POD, written by the
// stage-logs sidecar after the manifest (which it must never rewrite: the
// manifest is the stage-out's commit marker) and after the logs it lists.
func StepLogsKey(pod string) string { return LogsDir + pod + "/index.json" }

// StepLogs is the object at StepLogsKey.
type StepLogs struct {
	Version int `json:"version"`
	// Pod is the defer pod.
	Pod string `json:"pod"`
	// Logs are the defer containers' logs, as in the manifest's logs.
	Logs []ManifestFile `json:"logs"`
	// LogWarnings are the logs that could not be archived, with why.
	LogWarnings []LogWarning `json:"logWarnings,omitempty"`
}

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

// LogWarning is a log a stage-out step could not archive.
type LogWarning struct {
	// Pod is the pod whose log it is.
	Pod string `json:"pod"`
	// Container is the container whose log it is; empty when no log of the
	// pod could be listed (the endpoint could not be asked).
	Container string `json:"container,omitempty"`
	// Previous is the attempt before the container's last restart.
	Previous bool `json:"previous,omitempty"`
	// Reason says why, for a person.
	Reason string `json:"reason"`
}

// LogTruncation is what the object of a log longer than its cap holds: its
// first HeadBytes bytes, then the line LogTruncationMarker gives, then its
// last TailBytes bytes. A pod's start says what it was doing, its end why it
// ended; the middle is what is left out. Size = HeadBytes + the marker's
// length + TailBytes, and HeadBytes + TailBytes is the cap.
type LogTruncation struct {
	// originalSize is the length of the whole log: the bytes the container
	// wrote in that attempt, every rotated part included.
	OriginalSize int64 `json:"originalSize"`
	// headBytes is how many of the log's first bytes begin the object.
	HeadBytes int64 `json:"headBytes"`
	// tailBytes is how many of the log's last bytes end the object.
	TailBytes int64 `json:"tailBytes"`
}

// OmittedBytes is how many bytes of the log the object leaves out.
func (t LogTruncation) OmittedBytes() int64 { return t.OriginalSize - t.HeadBytes - t.TailBytes }

// LogTruncationMarker is the line between a cut log's head and tail: it
// starts with a newline so that it stands on a line of its own even when
// the head ends within a line (a reader who wants the head's exact bytes
// takes HeadBytes of them, not up to the marker).
func LogTruncationMarker(omitted, maxBytes int64) string {
	return fmt.Sprintf("\n[kdefer: %d bytes of this log were left out here; maxBytes=%d]\n", omitted, maxBytes)
}
