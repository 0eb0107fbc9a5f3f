package controller

import (
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	kt "github.com/kdefer/kdefer/controller/testing"
	"github.com/kdefer/kdefer/render"
	"github.com/kdefer/kdefer/stagecontract"
)

// The stage-out step, and the stage-logs sidecar beside it, mount the work
// volumes at kdefer's fixed path whatever the Job's mount path is: at
// /var/run the user's mount path would put the step's logs token and CA
// bundle inside the volume the job wrote, at /etc/ssl/certs it would make
// the job's files trusted CAs of the step that holds the store's
// credentials. No mount of kdefer's is under or over a work volume's, and
// the step resolves its source beneath the volume's mount point
// (--volume-root). The user's defer containers keep the user's path.
func TestDeferPodStageMountsFixed(t *testing.T) {
	opts := DeferPodOptions{StageImage: "kdefer.io/kdefer-stage:test",
		Logs: LogsEndpoint{URL: "https://kdefer-webhook.kdefer-system.svc" + stagecontract.LogsPath, CA: func() []byte { return []byte("CA") }}}
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") }
	for _, mp := range []string{"/var/run", "/etc/ssl/certs", "/tmp", "/var/run/secrets/kdefer.io", "/var", "/"} {
		t.Run(mp, func(t *testing.T) {
			run := kt.MakeRun("p", "ns").Trigger(v1.TriggerFailed, 1).Policy(func(p *v1.DeferPolicySpec) {
				p.WorkVolume.MountPath = mp
				p.StageOut.Path = "out"
				p.S3 = &v1.S3Settings{CABundle: &v1.CABundleSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}, Key: "ca.pem"}}}
				p.DeferContainers = []corev1.Container{{Name: "notify", Image: "curl"}}
			}).Obj()
			run.Spec.Volumes = append(run.Spec.Volumes, v1.RetainedVolume{Name: "scratch", ClaimName: "p-scratch"})
			pod := BuildDeferPod(run, opts)
			work := workVolumeNames(run)
			checked := 0
			for _, c := range pod.Spec.InitContainers {
				if c.Name != v1.StageOutStepName && c.Name != v1.StageLogsName {
					continue
				}
				checked++
				var mine, theirs []string
				for _, m := range c.VolumeMounts {
					if work[m.Name] {
						theirs = append(theirs, m.MountPath)
					} else {
						mine = append(mine, m.MountPath)
					}
				}
				if c.Name == v1.StageOutStepName {
					want := []string{render.StageMountPath, render.StageMountPath + "-scratch"}
					if !slices.Equal(theirs, want) {
						t.Errorf("%s mounts the work volumes at %v, want %v", c.Name, theirs, want)
					}
					from := path.Join(render.StageMountPath, "out")
					if i := slices.Index(c.Args, "--from"); i < 0 || c.Args[i+1] != from {
						t.Errorf("%s args %v, want --from %s", c.Name, c.Args, from)
					}
					if i := slices.Index(c.Args, "--volume-root"); i < 0 || c.Args[i+1] != render.StageMountPath {
						t.Errorf("%s args %v, want --volume-root %s", c.Name, c.Args, render.StageMountPath)
					}
				}
				if len(mine) < 2 {
					t.Errorf("%s mounts %v of kdefer's, want the token and the CA bundle at least", c.Name, mine)
				}
				for _, w := range theirs {
					for _, k := range mine {
						if under(k, w) || under(w, k) {
							t.Errorf("%s mounts kdefer's %s and a work volume at %s, one inside the other", c.Name, k, w)
						}
					}
				}
			}
			if checked != 2 {
				t.Fatalf("checked %d of stage-out and stage-logs, want both", checked)
			}
			notify := pod.Spec.Containers[0]
			if notify.Name != "notify" || len(notify.VolumeMounts) == 0 || notify.VolumeMounts[0].MountPath != mp {
				t.Errorf("defer container %s mounts %v, want the work volume at the user's %s", notify.Name, notify.VolumeMounts, mp)
			}
		})
	}
}
