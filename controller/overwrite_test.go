package controller

import (
	"slices"
	"testing"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/stagecontract"
)

// TestStageOutOverwrite: the stage-out step refuses a prefix an earlier
// attempt wrote unless the policy opts in with stageOut.overwrite, which
// reaches kdefer-stage as --overwrite.
func TestStageOutOverwrite(t *testing.T) {
	for _, overwrite := range []bool{false, true} {
		run := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) { p.StageOut.Overwrite = overwrite }).Obj()
		pod := BuildDeferPod(run, DeferPodOptions{StageImage: "img"})
		var args []string
		for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			if c.Name == v1.StageOutStepName {
				args = c.Args
			}
		}
		if args == nil {
			t.Fatal("no stage-out step")
		}
		if got := slices.Contains(args, "--overwrite"); got != overwrite {
			t.Errorf("overwrite %v: stage-out args %q", overwrite, args)
		}
	}
}

// TestStageOutRequireFilesAndChecksums: stageOut.requireFiles and
// stageOut.checksums reach kdefer-stage as the flags that do the same, and
// the API's checksum names are the ones the manifest records.
func TestStageOutRequireFilesAndChecksums(t *testing.T) {
	run := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
		p.StageOut.RequireFiles = true
		p.StageOut.Checksums = []v1.ManifestChecksum{v1.ManifestChecksumAdler32, v1.ManifestChecksumMD5}
	}).Obj()
	pod := BuildDeferPod(run, DeferPodOptions{StageImage: "img"})
	var args []string
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == v1.StageOutStepName {
			args = c.Args
		}
	}
	if !slices.Contains(args, "--require-files") || !slices.Contains(args, "adler32") || !slices.Contains(args, "md5") {
		t.Errorf("stage-out args %q lack --require-files or the checksums", args)
	}
	for _, c := range []v1.ManifestChecksum{v1.ManifestChecksumAdler32, v1.ManifestChecksumMD5, v1.ManifestChecksumSHA256} {
		if !slices.Contains(stagecontract.ManifestChecksums, string(c)) {
			t.Errorf("API checksum %q is not a manifest checksum %v", c, stagecontract.ManifestChecksums)
		}
	}
}
