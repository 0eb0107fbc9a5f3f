package stageout_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/stageout"
	"github.com/kdefer/kdefer/stageout/stagetest"
	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/storage/storagetest"
)

// attemptURL is the prefix every attempt of index 3 of Job sim expands to
// with a template like s3://b/{job}/{index}/.
const attemptURL = "mem://attempts/sim/3/"

// attemptOpts is outOpts as the stage-out step of pod name (uid) sees it.
func attemptOpts(be storage.Backend, from, name, uid string) stageout.Options {
	o := outOpts(be, from, attemptURL)
	env := map[string]string{stagecontract.EnvPod: name, stagecontract.EnvUID: uid, stagecontract.EnvJob: "sim", stagecontract.EnvIndex: "3"}
	o.Env = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	return o
}

// TestEarlierAttemptKept: a Job's retry whose URL template expands to the
// prefix of an earlier attempt (no {pod} or {uid}) must not replace that
// attempt's outputs: its stage-out fails, permanently, naming the pod that
// wrote them, and the earlier manifest and files are as they were. The same
// pod resumes, and the policy's overwrite lets a later attempt through.
func TestEarlierAttemptKept(t *testing.T) {
	ctx := context.Background()
	be, loc := storagetest.Open(t, attemptURL)
	first, second := t.TempDir(), t.TempDir()
	stagetest.MakeTree(t, first, stagetest.Tree{"out.dat": []byte("attempt 1")})
	stagetest.MakeTree(t, second, stagetest.Tree{"out.dat": []byte("attempt 2, different")})

	if _, err := stageout.Run(ctx, attemptOpts(be, first, "sim-3-aaaaa", "uid-1")); err != nil {
		t.Fatal(err)
	}
	before := string(manifestBytes(t, be, loc))

	// The same pod again (its stage-out step retried): a resume.
	if _, err := stageout.Run(ctx, attemptOpts(be, first, "sim-3-aaaaa", "uid-1")); err != nil {
		t.Fatalf("the same attempt could not resume: %v", err)
	}

	// The retry, another pod of the same index.
	_, err := stageout.Run(ctx, attemptOpts(be, second, "sim-3-bbbbb", "uid-2"))
	var se *storage.Error
	if !errors.As(err, &se) || se.Class != storage.Permanent || !strings.Contains(err.Error(), "sim-3-aaaaa") || !strings.Contains(err.Error(), "{pod}") {
		t.Fatalf("retry over an earlier attempt's outputs: got %v, want a permanent error naming pod sim-3-aaaaa and the fix", err)
	}
	if got := string(manifestBytes(t, be, loc)); got != before {
		t.Errorf("the earlier attempt's manifest changed:\n%s\nwant\n%s", got, before)
	}
	if got := string(storagetest.Read(t, be, loc.Prefix+"out.dat", 0, -1)); got != "attempt 1" {
		t.Errorf("the earlier attempt's file holds %q", got)
	}

	// Overwrite on purpose: the later attempt's outputs and identity.
	o := attemptOpts(be, second, "sim-3-bbbbb", "uid-2")
	o.Overwrite = true
	if _, err := stageout.Run(ctx, o); err != nil {
		t.Fatalf("overwrite: %v", err)
	}
	var m stagecontract.Manifest
	if err := json.Unmarshal(manifestBytes(t, be, loc), &m); err != nil {
		t.Fatal(err)
	}
	if m.Identity["pod"] != "sim-3-bbbbb" || m.Identity["uid"] != "uid-2" || m.Identity["index"] != "3" {
		t.Errorf("manifest identity %v: want the attempt that wrote it (pod, uid, index)", m.Identity)
	}
}

// TestHandRunResumes: kdefer-stage out run by hand (no KDEFER_UID) over a
// prefix it wrote before resumes as it always did.
func TestHandRunResumes(t *testing.T) {
	ctx := context.Background()
	u := "mem://byhand/run/"
	be, _ := storagetest.Open(t, u)
	src := t.TempDir()
	stagetest.MakeTree(t, src, stagetest.Tree{"a": []byte("a")})
	for range 2 {
		if _, err := stageout.Run(ctx, outOpts(be, src, u)); err != nil {
			t.Fatal(err)
		}
	}
}
