package envtest_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/envtest"
)

// TestArmAtVolumeCreation: on a real apiserver with deploy/webhook's
// configuration, creating a managed pod's work PVC (as the ephemeral-volume
// controller does) creates the pod's DeferRun and the PVC is stored with
// the run as its second owner; unmanaged pods' PVCs, PVCs without the
// work-volume label and dry runs get nothing.
func TestArmAtVolumeCreation(t *testing.T) {
	env := envtest.Start(t, envtest.WithWebhooks())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	serveWebhooks(t, ctx, env)
	ns := namespace(t, env, "arm")

	mkPod := func(name string, managed bool) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
				v1.AnnotationStageOut: "s3://bucket/{namespace}/{pod}/"}},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
				Volumes: []corev1.Volume{{Name: v1.DefaultWorkVolumeName, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
					VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1.LabelWorkVolume: v1.DefaultWorkVolumeName}},
						Spec:       claimSpec(),
					}}}}},
			},
		}
		if managed {
			p.Labels = map[string]string{v1.LabelManaged: "true"}
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// claimOf is the PVC the ephemeral-volume controller makes for pod.
	claimOf := func(pod *corev1.Pod, labelled bool) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name + "-" + v1.DefaultWorkVolumeName, Namespace: ns,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
					Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}},
			Spec: claimSpec(),
		}
		if labelled {
			pvc.Labels = map[string]string{v1.LabelWorkVolume: v1.DefaultWorkVolumeName}
		}
		return pvc
	}
	runOf := func(pod *corev1.Pod) (*v1.DeferRun, error) {
		run := &v1.DeferRun{}
		return run, env.Client.Get(ctx, client.ObjectKeyFromObject(pod), run)
	}

	pod := mkPod("sim-a1", true)
	// A dry run arms nothing.
	if err := env.Client.Create(ctx, claimOf(pod, true), client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if _, err := runOf(pod); !apierrors.IsNotFound(err) {
		t.Fatalf("a dry run created the DeferRun: %v", err)
	}
	pvc := claimOf(pod, true)
	if err := env.Client.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	run, err := runOf(pod)
	if err != nil {
		t.Fatalf("no DeferRun after the work PVC's creation: %v", err)
	}
	if run.Spec.PodUID != pod.UID || run.Spec.Policy.StageOut == nil || len(run.Spec.Volumes) != 1 || run.Spec.Volumes[0].ClaimName != pvc.Name {
		t.Errorf("run spec %+v", run.Spec)
	}
	want := []metav1.OwnerReference{pvc.OwnerReferences[0], {APIVersion: v1.GroupVersion.String(), Kind: "DeferRun", Name: run.Name, UID: run.UID,
		Controller: ptr(false), BlockOwnerDeletion: ptr(false)}}
	if diff := cmp.Diff(want, pvc.OwnerReferences); diff != "" {
		t.Errorf("stored PVC owners (-want +got):\n%s", diff)
	}

	// A second work PVC of the same pod finds the run.
	second := claimOf(pod, true)
	second.Name = pod.Name + "-cache"
	if err := env.Client.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	if len(second.OwnerReferences) != 2 || second.OwnerReferences[1].UID != run.UID {
		t.Errorf("second PVC owners %+v, want the same run", second.OwnerReferences)
	}

	for name, tc := range map[string]struct {
		managed, labelled bool
	}{
		"unmanaged pod":     {managed: false, labelled: true},
		"not a work volume": {managed: true, labelled: false},
	} {
		p := mkPod("sim-"+map[bool]string{true: "m", false: "u"}[tc.managed]+map[bool]string{true: "l", false: "n"}[tc.labelled], tc.managed)
		c := claimOf(p, tc.labelled)
		if err := env.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		if len(c.OwnerReferences) != 1 {
			t.Errorf("%s: PVC owners %+v, want the pod only", name, c.OwnerReferences)
		}
		if _, err := runOf(p); !apierrors.IsNotFound(err) {
			t.Errorf("%s: a DeferRun was created: %v", name, err)
		}
	}
}

func claimSpec() corev1.PersistentVolumeClaimSpec {
	return corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
}
