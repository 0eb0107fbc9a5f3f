package stageout

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// guardEarlierAttempt refuses, before anything is written, a prefix whose
// manifest another pod wrote: an earlier attempt of a Job's pod (a retry
// within backoffLimit, a re-run index, a re-run Job) whose URL template
// expanded to the same prefix. Stage-out would otherwise delete that
// manifest (beforeWrite) and replace its files one by one, and the earlier
// attempt's outputs would be lost without a word. The same pod (same
// KDEFER_UID: its stage-out step retried, its defer pod recreated) resumes
// as before; so does a stage-out run by hand, without a KDEFER_UID; and
// Options.Overwrite (the policy's stageOut.overwrite) lets it through.
func (e *engine) guardEarlierAttempt(ctx context.Context) error {
	uid, _ := e.o.Env(stagecontract.EnvUID)
	if e.o.Overwrite || !e.hasManifest || uid == "" {
		return nil
	}
	prev, err := storage.ReadManifestWriter(ctx, e.be, e.manifestKey, e.o.Retry)
	if err != nil {
		return err
	}
	if prev["uid"] == uid {
		return nil
	}
	return storage.Permanentf("stage out to a URL template with {pod} or {uid}, which every attempt expands to its own prefix, or set stageOut.overwrite: true in the DeferPolicy to replace earlier outputs on purpose",
		"%s already holds the outputs of %s, not of this pod (uid %s); kdefer does not overwrite them", e.prefixURL, describeWriter(prev), uid)
}

// describeWriter names the writer of a manifest for a person.
func describeWriter(id map[string]string) string {
	if len(id) == 0 {
		return "a stage-out that recorded no pod"
	}
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+id[k])
	}
	return fmt.Sprintf("another pod (%s)", strings.Join(parts, ", "))
}
