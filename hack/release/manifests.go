package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/kdefer/kdefer/api/v1alpha1"
)

// stageImageFlag is the controller's flag naming the stage image.
const stageImageFlag = "--stage-image="

// writeManifests writes `kustomize build KUSTOMIZATION` (deploy/: the
// default install) with kdefer's images those of version v in reg: the
// controller's and node agent's image, and the stage image the controller
// is given as an argument, which kustomize's images transformer would not
// reach (it edits image fields only). Everything else is as deploy/ has it,
// so `kubectl apply --server-side -f manifests.yaml` installs what
// `kubectl apply -k deploy/` of that commit does.
func writeManifests(root, kustomization, out, reg, v string) error {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(root, kustomization))
	if err != nil {
		return fmt.Errorf("kustomize build %s: %w", kustomization, err)
	}
	data, err := m.AsYaml()
	if err != nil {
		return err
	}
	nodes, err := kio.FromBytes(data)
	if err != nil {
		return err
	}
	images, stages := 0, 0
	for _, n := range nodes {
		if k := n.GetKind(); k != "Deployment" && k != "DaemonSet" {
			continue
		}
		cs, err := n.Pipe(yaml.Lookup("spec", "template", "spec", "containers"))
		if err != nil || cs == nil {
			continue
		}
		err = cs.VisitElements(func(c *yaml.RNode) error {
			if img := c.Field("image"); img != nil && imageName(img.Value.YNode().Value) == v1alpha1.ControllerImageName {
				img.Value.YNode().Value = reg + "/" + v1alpha1.ControllerImageName + ":" + v
				images++
			}
			args := c.Field("args")
			if args == nil {
				return nil
			}
			return args.Value.VisitElements(func(a *yaml.RNode) error {
				if strings.HasPrefix(a.YNode().Value, stageImageFlag) {
					a.YNode().Value = stageImageFlag + reg + "/" + v1alpha1.StageImageName + ":" + v
					stages++
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
	}
	// deploy/ has the controller and the node agent, and one stage image
	// flag: a build that stamped fewer lost track of them.
	if images < 2 || stages != 1 {
		return fmt.Errorf("kustomize build %s: stamped %d %s images and %d %s flags, want 2 and 1", kustomization, images, v1alpha1.ControllerImageName, stages, stageImageFlag)
	}
	s, err := kio.StringAll(nodes)
	if err != nil {
		return err
	}
	header := fmt.Sprintf("# kdefer %s: kubectl apply --server-side -f manifests.yaml\n# (kustomize build %s, images in %s)\n", v, kustomization, reg)
	return os.WriteFile(out, []byte(header+s), 0o644)
}

// imageName is the last path element of an image reference, without tag or digest.
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		ref = ref[i+1:]
	}
	n, _, _ := strings.Cut(ref, ":")
	return n
}
