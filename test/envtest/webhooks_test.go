package envtest_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	rt "github.com/kdefer/kdefer/render/testing"
	"github.com/kdefer/kdefer/test/envtest"
)

func testWebhooks(t *testing.T, env *envtest.Env) {
	ctx := context.Background()
	ns := namespace(t, env, "jobs")

	t.Run("rendered on create", func(t *testing.T) {
		job := rt.MakeJob("sim", ns).StageOut("s3://results/{job}/{pod}/").
			Annotation(v1.AnnotationCredentials, "minio").Annotation(v1.AnnotationStageIn, "s3://inputs/sim/").Obj()
		sent := job.DeepCopy()
		if err := env.Client.Create(ctx, job); err != nil {
			t.Fatalf("create: %v", err)
		}
		got := &batchv1.Job{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
			t.Fatal(err)
		}
		tmpl := got.Spec.Template
		if tmpl.Labels[v1.LabelManaged] != "true" || !slices.Contains(tmpl.Finalizers, v1.PodFinalizer) || tmpl.Annotations[v1.AnnotationRendered] == "" {
			t.Errorf("template not rendered: labels %v finalizers %v annotations %v", tmpl.Labels, tmpl.Finalizers, tmpl.Annotations)
		}
		if len(tmpl.Spec.InitContainers) != 1 || tmpl.Spec.InitContainers[0].Name != render.StageInContainerName ||
			tmpl.Spec.InitContainers[0].EnvFrom[0].SecretRef.Name != "minio" {
			t.Errorf("stage-in init container missing or without credentials: %+v", tmpl.Spec.InitContainers)
		}
		for _, c := range tmpl.Spec.Containers {
			if len(c.EnvFrom) > 0 {
				t.Errorf("main container %s receives envFrom %v", c.Name, c.EnvFrom)
			}
		}
		vol := tmpl.Spec.Volumes[len(tmpl.Spec.Volumes)-1]
		if vol.Ephemeral == nil || vol.Ephemeral.VolumeClaimTemplate.Labels[v1.LabelWorkVolume] != v1.DefaultWorkVolumeName {
			t.Errorf("work volume %+v", vol)
		}
		// What the apiserver stored equals render's output on what was sent,
		// apart from the apiserver's own defaulting.
		want, err := render.Job(sent, nil, renderOpts)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.Spec.Template.Spec.InitContainers[0].Args, tmpl.Spec.InitContainers[0].Args); diff != "" {
			t.Errorf("stage-in args (-render +stored):\n%s", diff)
		}
		// A metadata update of the running Job (e.g. kdefer skip) passes.
		got.Annotations[v1.AnnotationSkip] = "true"
		if err := env.Client.Update(ctx, got); err != nil {
			t.Errorf("annotating the Job: %v", err)
		}
	})

	t.Run("locked policy", func(t *testing.T) {
		policy := rt.MakePolicy("locked", ns, "s3://team/{job}/{pod}/").Credentials("team-creds").Obj()
		policy.Spec.Locked = []v1.LockedField{v1.LockedStageOut, v1.LockedCredentials}
		if err := env.Client.Create(ctx, policy); err != nil {
			t.Fatal(err)
		}
		job := rt.MakeJob("redirect", ns).Annotation(v1.AnnotationPolicy, "locked").
			Annotation(v1.AnnotationStageOut, "s3://elsewhere/{pod}/").Annotation(v1.AnnotationCredentials, "mine").Obj()
		wantDenied(t, env.Client.Create(ctx, job), v1.AnnotationStageOut, v1.AnnotationCredentials,
			"which the policy locks (spec.locked)", "remove the annotation")
		ok := rt.MakeJob("obeys", ns).Annotation(v1.AnnotationPolicy, "locked").Annotation(v1.AnnotationDeadline, "1h").Obj()
		if err := env.Client.Create(ctx, ok); err != nil {
			t.Errorf("a Job overriding only unlocked fields: %v", err)
		}
	})

	t.Run("policy", func(t *testing.T) {
		policy := rt.MakePolicy("team", ns, "s3://team/{job}/{pod}/").Credentials("team-creds").Obj()
		if err := env.Client.Create(ctx, policy); err != nil {
			t.Fatal(err)
		}
		job := rt.MakeJob("with-policy", ns).Annotation(v1.AnnotationPolicy, "team").Obj()
		if err := env.Client.Create(ctx, job); err != nil {
			t.Fatalf("create: %v", err)
		}
		if job.Spec.Template.Annotations[v1.AnnotationRendered] == "" {
			t.Error("the Job returned by create is not rendered")
		}
		missing := rt.MakeJob("missing-policy", ns).Annotation(v1.AnnotationPolicy, "nope").Obj()
		wantDenied(t, env.Client.Create(ctx, missing), `annotation kdefer.io/policy: DeferPolicy "nope" does not exist in namespace "jobs"; fix: create it first`)
	})

	denials := []struct {
		name string
		job  *batchv1.Job
		want []string
	}{
		{name: "malformed annotations, all at once", job: rt.MakeJob("bad", ns).StageOut("s3://results/{pod}/").
			Annotation(v1.AnnotationDeadline, "soon").Annotation(v1.AnnotationTriggers, "Succeeded,Exploded").Obj(),
			want: []string{`admission webhook "render.jobs.kdefer.io" denied the request`,
				`annotation kdefer.io/deadline: "soon" is not a positive duration; fix: use a Go duration such as 30m or 2h`,
				`annotation kdefer.io/triggers: "Exploded" is not a trigger; fix: use "all" or a comma-separated list of`}},
		{name: "no stage-out", job: rt.MakeJob("nothing", ns).Obj(),
			want: []string{"annotation kdefer.io/stage-out: is not set and no DeferPolicy is named", "fix: set kdefer.io/stage-out"}},
		{name: "hostPath work volume", job: rt.MakeJob("hostpath", ns).StageOut("s3://r/{pod}/").Annotation(v1.AnnotationWorkVolume, "data").
			Volume(corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}}).Obj(),
			want: []string{`volume "data" (kdefer.io/work-volume): is a hostPath volume`}},
		{name: "credentials in main container", job: rt.MakeJob("leak", ns).StageOut("s3://r/{pod}/").Annotation(v1.AnnotationCredentials, "minio").EnvFromSecret(0, "minio").Obj(),
			want: []string{`receives the credentials Secret "minio"`}},
		// Not taken for kdefer's own stage-in, which alone gets the Secret.
		{name: "init container named like kdefer's stage-in", job: rt.MakeJob("forged", ns).StageOut("s3://r/{pod}/").Annotation(v1.AnnotationCredentials, "minio").
			InitContainer(corev1.Container{Name: "kdefer-stage-in", Image: "busybox", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "minio"}}}}}).Obj(),
			want: []string{`admission webhook "render.jobs.kdefer.io" denied the request`,
				`spec.template.spec.initContainers[0].name: "kdefer-stage-in" is reserved for kdefer`, "fix: rename the container"}},
	}
	for _, tc := range denials {
		t.Run(tc.name, func(t *testing.T) { wantDenied(t, env.Client.Create(ctx, tc.job), tc.want...) })
	}

	t.Run("unlabelled Jobs are not touched", func(t *testing.T) {
		job := rt.MakeJob("plain", ns).NoLabel(v1.LabelEnabled).Obj()
		if err := env.Client.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		if job.Spec.Template.Labels[v1.LabelManaged] != "" || len(job.Spec.Template.Finalizers) != 0 {
			t.Errorf("unlabelled Job was rendered: %+v", job.Spec.Template.ObjectMeta)
		}
	})

	t.Run("DeferPolicy validation", func(t *testing.T) {
		bad := rt.MakePolicy("bad", ns, "s3://b/{pod}/").
			TriggerRule(v1.TriggerRule{Triggers: []v1.Trigger{v1.TriggerFailed}, DeferContainers: []string{"notify"}}).Obj()
		wantDenied(t, env.Client.Create(ctx, bad), `admission webhook "validate.deferpolicies.kdefer.io" denied the request`,
			`spec.triggerRules[0].deferContainers[0]: Invalid value: "notify": names no entry of spec.deferContainers`)
		reserved := rt.MakePolicy("reserved", ns, "s3://b/{pod}/").DeferContainer(corev1.Container{Name: "stage-out", Image: "x"}).Obj()
		wantDenied(t, env.Client.Create(ctx, reserved), `spec.deferContainers[0].name: Forbidden: "stage-out" is reserved for kdefer`)
		// The defer pod's volumes that are kdefer's: the logs token, /tmp.
		for _, vol := range []string{"kdefer-logs-token", "kdefer-tmp"} {
			mounts := rt.MakePolicy("mounts-"+vol[len("kdefer-"):], ns, "s3://b/{pod}/").DeferContainer(corev1.Container{Name: "peek", Image: "x",
				VolumeMounts: []corev1.VolumeMount{{Name: v1.DefaultWorkVolumeName, MountPath: "/w"}, {Name: vol, MountPath: "/k"}}}).Obj()
			wantDenied(t, env.Client.Create(ctx, mounts), `admission webhook "validate.deferpolicies.kdefer.io" denied the request`,
				`spec.deferContainers[0].volumeMounts[1].name: Forbidden: "`+vol+`" is reserved for kdefer`)
		}
	})
}
