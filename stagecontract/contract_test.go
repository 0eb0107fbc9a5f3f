package stagecontract

import "testing"

// The controller validates placeholders against URLPlaceholders and
// kdefer-stage expands them through PlaceholderEnv: a placeholder in one and
// not the other would pass validation and fail every stage step.
func TestPlaceholdersHaveVariables(t *testing.T) {
	if len(PlaceholderEnv) != len(URLPlaceholders) {
		t.Errorf("PlaceholderEnv has %d entries, URLPlaceholders %d", len(PlaceholderEnv), len(URLPlaceholders))
	}
	for _, p := range URLPlaceholders {
		if PlaceholderEnv[p] == "" {
			t.Errorf("placeholder {%s} has no environment variable", p)
		}
	}
	for k, env := range IdentityEnv {
		if PlaceholderEnv[k] != env {
			t.Errorf("identity %q reads %s, but placeholder {%s} expands %s", k, env, k, PlaceholderEnv[k])
		}
	}
}

func TestManifestKeyIsReserved(t *testing.T) {
	if got := ManifestKey[:len(ReservedDir)]; got != ReservedDir {
		t.Errorf("ManifestKey %q is not under ReservedDir %q", ManifestKey, ReservedDir)
	}
}
