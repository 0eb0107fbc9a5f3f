package controller

import (
	"slices"
	"testing"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
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
