package stagecontract

// Environment variables set in every stage-in, stage-out and defer step.
const (
	EnvNamespace = "KDEFER_NAMESPACE"
	EnvJob       = "KDEFER_JOB"
	EnvPod       = "KDEFER_POD"
	EnvNode      = "KDEFER_NODE"
	EnvUID       = "KDEFER_UID"
	EnvIndex     = "KDEFER_INDEX"
	EnvTrigger   = "KDEFER_TRIGGER"
	EnvExitCode  = "KDEFER_EXIT_CODE"
)

// IdentityEnv maps each key of a manifest's Identity to the environment
// variable it is read from.
var IdentityEnv = map[string]string{
	"namespace": EnvNamespace,
	"job":       EnvJob,
	"pod":       EnvPod,
	"node":      EnvNode,
	"uid":       EnvUID,
	"index":     EnvIndex,
}

// Exit codes of kdefer-stage. The controller ends a defer run at once when a
// step exits with ExitPermanent or ExitUsage instead of retrying it until the
// deadline.
const (
	ExitOK        = 0
	ExitTransient = 1 // retrying may help (network, 5xx, throttling)
	ExitUsage     = 2 // bad flags or arguments
	ExitPermanent = 3 // auth, missing bucket, malformed URL, permission, hostile keys
)
