package stagecontract

// URLSchemes are the storage schemes kdefer-stage understands. The
// controller refuses a stage URL with any other scheme before a pod runs.
var URLSchemes = []string{"s3", "gs", "azblob", "file", "mem"}

// URLPlaceholders are the placeholders a stage URL template may hold, in
// documentation order. kdefer-stage expands each per pod from the variable
// PlaceholderEnv names; the controller refuses any other placeholder.
var URLPlaceholders = []string{"namespace", "job", "pod", "index", "trigger", "uid", "node"}

// PlaceholderEnv maps each of URLPlaceholders to the environment variable it
// is expanded from.
var PlaceholderEnv = map[string]string{
	"namespace": EnvNamespace,
	"job":       EnvJob,
	"pod":       EnvPod,
	"index":     EnvIndex,
	"trigger":   EnvTrigger,
	"uid":       EnvUID,
	"node":      EnvNode,
}
