package stagecontract

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

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

// URLParams are the query parameters a stage URL of each scheme but s3 may
// carry, each with the form of its value (s3's are ParseS3Query's). kdefer-stage refuses any other before it
// touches storage, and the controller (and `kdefer lint`) refuse them before a
// pod runs, both through CheckURLQuery: a typo (?endpont=) would otherwise
// send the outputs to AWS, or fail only after the pod died. The gs, azblob
// and file lists are those the gocloud.dev drivers (v0.49) accept, minus what
// makes no sense for a stage step (signing keys, gs's universe_domain).
var URLParams = map[string]map[string]ParamForm{
	"gs":     {"anonymous": ParamBool, "access_id": ParamText, "grpc": ParamBool, "zonal": ParamBool},
	"azblob": {"domain": ParamText, "protocol": ParamText, "cdn": ParamBool, "localemu": ParamBool, "storage_account": ParamText},
	"file":   {"create_dir": ParamText, "no_tmp_dir": ParamText, "dir_file_mode": ParamText, "metadata": ParamText},
	"mem":    {},
}

// ParamForm is the form of a stage URL parameter's value.
type ParamForm int

const (
	// ParamText is any value.
	ParamText ParamForm = iota
	// ParamBool is true or false (strconv.ParseBool).
	ParamBool
)

// CheckURLQuery returns a problem with a stage URL's query parameters and
// its fix, or "" (the scheme itself is checked elsewhere). s3:// URLs are
// ParseS3Query's, the rule the S3 driver itself applies.
func CheckURLQuery(scheme string, q url.Values) (problem, fix string) {
	if scheme == "s3" {
		if _, err := ParseS3Query(q); err != nil {
			var pe *ParamError
			if errors.As(err, &pe) {
				return pe.Error(), pe.Fix
			}
			return err.Error(), ""
		}
		return "", ""
	}
	allowed, ok := URLParams[scheme]
	if !ok {
		return "", ""
	}
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		form, ok := allowed[k]
		if !ok {
			known := make([]string, 0, len(allowed))
			for a := range allowed {
				known = append(known, a)
			}
			sort.Strings(known)
			fix := scheme + ":// URLs take no parameters: remove it"
			if len(known) > 0 {
				fix = "remove it; " + scheme + ":// accepts " + strings.Join(known, ", ")
			}
			return fmt.Sprintf("%s URL parameter %q is unknown", scheme, k), fix
		}
		if len(q[k]) > 1 {
			return fmt.Sprintf("%s URL parameter %q is given %d times", scheme, k, len(q[k])), "give it once"
		}
		if v := q.Get(k); form == ParamBool {
			if _, err := strconv.ParseBool(v); err != nil {
				return fmt.Sprintf("%s URL parameter %s=%q is not a boolean", scheme, k, v), "use " + k + "=true or false"
			}
		}
	}
	return "", ""
}
