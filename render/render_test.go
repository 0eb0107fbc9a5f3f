package render_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/render"
	rt "github.com/kdefer/kdefer/render/testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from render's output")

const (
	ns  = "physics"
	url = "s3://results/runs/{namespace}/{job}/{pod}/?endpoint=http://10.88.0.1:9000"
)

var opts = render.Options{StageImage: "kdefer.io/kdefer-stage:test"}

func always() *corev1.ContainerRestartPolicy {
	p := corev1.ContainerRestartPolicyAlways
	return &p
}

// shapes are real-world Jobs as users write them.
var shapes = []struct {
	name   string
	job    *batchv1.Job
	policy *v1.DeferPolicySpec
}{
	{name: "minimal", job: rt.MakeJob("sim", ns).StageOut(url).Obj()},
	{
		name: "indexed-emptydir-stagein",
		job: rt.MakeJob("sweep", ns).Indexed(100, 10).
			Annotation(v1.AnnotationStageOut, "s3://results/sweep/{index}/").
			Annotation(v1.AnnotationStageIn, "s3://inputs/sweep/{index}/,s3://inputs/common/").
			Annotation(v1.AnnotationStageInPath, "in").
			Annotation(v1.AnnotationCredentials, "minio").
			Annotation(v1.AnnotationWorkVolume, "scratch").
			EmptyDir("scratch", "/scratch").Obj(),
	},
	{
		name: "multi-container-new-volume",
		job: rt.MakeJob("pipeline", ns).StageOut(url).
			Annotation(v1.AnnotationWorkMountPath, "/out").
			Annotation(v1.AnnotationWorkSize, "20Gi").
			Annotation(v1.AnnotationStorageClass, "local").
			Container(corev1.Container{Name: "monitor", Image: "busybox:1.36", Args: []string{"top"}}).Obj(),
	},
	{
		name: "native-sidecar-and-init",
		job: rt.MakeJob("with-sidecar", ns).StageOut(url).
			Annotation(v1.AnnotationStageIn, "s3://inputs/x/").
			InitContainer(corev1.Container{Name: "setup", Image: "busybox:1.36", Args: []string{"true"}}).
			InitContainer(corev1.Container{Name: "log-shipper", Image: "fluentbit:3", RestartPolicy: always()}).Obj(),
	},
	{
		name: "existing-volumes-sizelimit",
		job: rt.MakeJob("existing", ns).StageOut(url).
			Annotation(v1.AnnotationWorkVolume, "data").
			Volume(corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}).
			Volume(corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr(resource.MustParse("5Gi"))}}}).
			Mount(0, "config", "/etc/app").Mount(0, "data", "/data").Obj(),
	},
	{
		name: "pod-failure-policy-suspended",
		job: rt.MakeJob("pfp", ns).StageOut(url).Suspend(true).Annotation(v1.AnnotationTriggers, "Succeeded,Failed,OOMKilled").
			PodFailurePolicy(&batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:      batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: ptr("main"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}},
			}}}).Obj(),
	},
	{
		name:   "policy-with-template-annotations",
		job:    rt.MakeJob("policy", ns).Annotation(v1.AnnotationPolicy, "team").TemplateAnnotation(v1.AnnotationDeadline, "2h").TemplateLabel("app", "sim").Obj(),
		policy: &rt.MakePolicy("team", ns, "gs://team/{job}/{pod}/").Credentials("gcs").StageIn("gs://team/in/", "").WorkVolume("work", "/work", "2Gi").Obj().Spec,
	},
	{
		// The volumes render adds that the apiserver then defaults (a
		// projected token, a Secret's key): the rendered and defaulted
		// Job is still rendered, as the validating webhook sees it.
		name: "web-identity-ca-bundle-stagein",
		job:  rt.MakeJob("cloud", ns).Annotation(v1.AnnotationPolicy, "cloud").Obj(),
		policy: &v1.DeferPolicySpec{
			StageOut: &v1.StageOut{URL: "s3://out/{pod}/"}, StageIn: []v1.StageIn{{URL: "s3://in/data/"}},
			ServiceAccountName: "stager", ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
			WebIdentity: &v1.WebIdentity{S3: &v1.S3WebIdentity{RoleARN: "arn:aws:iam::1:role/r"}},
			S3: &v1.S3Settings{CABundle: &v1.CABundleSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "site-ca"}, Key: "ca.crt"}}},
		},
	},
	{
		name: "existing-ephemeral-volume",
		job: rt.MakeJob("ephemeral", ns).StageOut(url).Annotation(v1.AnnotationWorkVolume, "work").
			Volume(corev1.Volume{Name: "work", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("3Gi")}}},
			}}}}).Mount(0, "work", "/work").Obj(),
	},
}

func ptr[T any](v T) *T { return &v }

func TestRenderGolden(t *testing.T) {
	for _, tc := range shapes {
		t.Run(tc.name, func(t *testing.T) {
			orig := tc.job.DeepCopy()
			got, err := render.Job(tc.job, tc.policy, opts)
			if err != nil {
				t.Fatalf("render.Job: %v", err)
			}
			if diff := cmp.Diff(orig, tc.job); diff != "" {
				t.Fatalf("render.Job changed its input (-before +after):\n%s", diff)
			}
			out, err := yaml.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading golden file (run go test ./render -update): %v", err)
			}
			if diff := cmp.Diff(string(want), string(out)); diff != "" {
				t.Errorf("render.Job differs from %s (-want +got):\n%s", golden, diff)
			}

			// Idempotence: rendering a rendered Job changes nothing.
			again, err := render.Job(got, tc.policy, opts)
			if err != nil {
				t.Fatalf("rendering the rendered Job: %v", err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("render is not idempotent (-once +twice):\n%s", diff)
			}
			if ok, why := render.IsRendered(got, tc.policy, opts); !ok {
				t.Errorf("IsRendered(rendered) = false: %s", why)
			}
			// The apiserver's defaults do not make a rendered Job unrendered.
			defaulted := got.DeepCopy()
			simulateDefaults(defaulted)
			if ok, why := render.IsRendered(defaulted, tc.policy, opts); !ok {
				t.Errorf("IsRendered(rendered and defaulted) = false: %s", why)
			}
			if ok, _ := render.IsRendered(orig, tc.policy, opts); ok {
				t.Errorf("IsRendered(original) = true")
			}

			// Nothing else changed.
			if diff := cmp.Diff(orig, unrender(t, got, orig)); diff != "" {
				t.Errorf("render changed more than kdefer's parts (-original +rendered with kdefer's parts removed):\n%s", diff)
			}
			checkInvariants(t, got, tc.policy)
		})
	}
}

func TestRenderRefuses(t *testing.T) {
	cases := []struct {
		name   string
		job    *batchv1.Job
		policy *v1.DeferPolicySpec
		want   []string
	}{
		{name: "nothing to do", job: rt.MakeJob("j", ns).Obj(),
			want: []string{"annotation kdefer.io/stage-out: is not set and no DeferPolicy is named", "fix: set kdefer.io/stage-out"}},
		{name: "hostPath work volume", job: rt.MakeJob("j", ns).StageOut(url).Annotation(v1.AnnotationWorkVolume, "data").
			Volume(corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}}).Obj(),
			want: []string{`volume "data" (kdefer.io/work-volume): is a hostPath volume`, "fix: point kdefer.io/work-volume at an emptyDir"}},
		{name: "pvc work volume", job: rt.MakeJob("j", ns).StageOut(url).Annotation(v1.AnnotationWorkVolume, "data").
			Volume(corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "x"}}}).Obj(),
			want: []string{"is a persistentVolumeClaim volume"}},
		{name: "volume not found", job: rt.MakeJob("j", ns).StageOut(url).Annotation(v1.AnnotationWorkVolume, "scrach").EmptyDir("scratch", "/scratch").Obj(),
			want: []string{`volume "scrach" (kdefer.io/work-volume): does not exist in the pod template; fix: name an existing emptyDir volume (the template has: scratch), or set kdefer.io/work-mount-path too`}},
		{name: "memory emptyDir", job: rt.MakeJob("j", ns).StageOut(url).Annotation(v1.AnnotationWorkVolume, "data").
			Volume(corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}).Obj(),
			want: []string{"is a memory-backed emptyDir"}},
		{name: "conflicting mount path", job: rt.MakeJob("j", ns).StageOut(url).EmptyDir("cache", "/kdefer").Obj(),
			want: []string{`spec.template.spec.containers[0] (main): already mounts volume "cache" at /kdefer`, "fix: set kdefer.io/work-mount-path to another path, or set kdefer.io/work-volume: cache"}},
		{name: "credentials in main container", job: rt.MakeJob("j", ns).StageOut(url).Annotation(v1.AnnotationCredentials, "minio").EnvFromSecret(0, "minio").Obj(),
			want: []string{`spec.template.spec.containers[0] (main).envFrom: receives the credentials Secret "minio"`}},
		{name: "credentials by key and volume", job: rt.MakeJob("j", ns).StageOut(url).Annotation(v1.AnnotationCredentials, "minio").
			Container(corev1.Container{Name: "b", Image: "x", Env: []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "minio"}, Key: "AWS_SECRET_ACCESS_KEY"}}}}}).
			Volume(corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "minio"}}}).Mount(0, "creds", "/creds").Obj(),
			want: []string{`containers[0] (main).volumeMounts: mounts volume "creds"`, `containers[1] (b).env[K]: reads key "AWS_SECRET_ACCESS_KEY"`}},
		{name: "unknown trigger and bad duration, all at once", job: rt.MakeJob("j", ns).StageOut(url).Annotation(v1.AnnotationTriggers, "Exploded").Annotation(v1.AnnotationDeadline, "ages").Obj(),
			want: []string{"annotation kdefer.io/deadline:", "annotation kdefer.io/triggers:"}},
		{name: "malformed url", job: rt.MakeJob("j", ns).StageOut("s3//bucket").Obj(),
			want: []string{`annotation kdefer.io/stage-out: "s3//bucket" is not a URL`}},
		{name: "index without Indexed", job: rt.MakeJob("j", ns).StageOut("s3://b/{index}/").Obj(),
			want: []string{"annotation kdefer.io/stage-out: uses {index}, but the Job is not Indexed"}},
		{name: "reserved container name", job: rt.MakeJob("j", ns).StageOut(url).Container(corev1.Container{Name: "kdefer-stage-in", Image: "x"}).Obj(),
			want: []string{`spec.template.spec.containers[1].name: "kdefer-stage-in" is reserved for kdefer`, "fix: rename the container"}},
		{name: "include without url", job: rt.MakeJob("j", ns).Annotation(v1.AnnotationPolicy, "p").Annotation(v1.AnnotationInclude, "*.log").Obj(),
			policy: &v1.DeferPolicySpec{DeferContainers: []corev1.Container{{Name: "d", Image: "x"}}},
			want:   []string{"annotation kdefer.io/include: is set, but no stage-out URL is"}},
		{name: "policy without stage-out", job: rt.MakeJob("j", ns).Annotation(v1.AnnotationPolicy, "p").Obj(), policy: &v1.DeferPolicySpec{},
			want: []string{`annotation kdefer.io/stage-out: is not set and DeferPolicy "p" has neither stageOut nor deferContainers`}},
		{name: "mem:// saves nothing", job: rt.MakeJob("j", ns).StageOut("mem://b/{pod}/").Obj(),
			want: []string{`annotation kdefer.io/stage-out: "mem://b/{pod}/" is in the memory of the stage step, which nothing outlives`}},
		{name: "file:// unless the cluster allows it", job: rt.MakeJob("j", ns).StageOut("file:///data/{pod}/").Obj(),
			want: []string{"policy.stageOut.url: Forbidden: file:// URLs write to the node's filesystem and are allowed only when kdefer-controller runs with --allow-file-urls"}},
		{name: "policy's defer container weakens Pod Security", job: rt.MakeJob("j", ns).Annotation(v1.AnnotationPolicy, "p").Obj(),
			policy: &v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/{pod}/"}, DeferContainers: []corev1.Container{{Name: "d", Image: "x",
				SecurityContext: &corev1.SecurityContext{Privileged: ptr(true), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}}}},
			want: []string{"policy.deferContainers[0].securityContext.privileged: Forbidden", "policy.deferContainers[0].securityContext.capabilities.add[0]: Forbidden: capability SYS_ADMIN"}},
		{name: "annotation hands a defer container the stage credentials", job: rt.MakeJob("j", ns).Annotation(v1.AnnotationPolicy, "p").
			Annotation(v1.AnnotationCredentials, "team-token").Obj(),
			policy: &v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/{pod}/"}, DeferContainers: []corev1.Container{{Name: "d", Image: "x",
				Env: []corev1.EnvVar{{Name: "T", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "team-token"}, Key: "t"}}}}}}},
			want: []string{`policy.deferContainers[0].env[0].valueFrom.secretKeyRef: Forbidden: reads the stage credentials Secret "team-token"`}},
		{name: "invalid policy field", job: rt.MakeJob("j", ns).Annotation(v1.AnnotationPolicy, "p").Obj(),
			policy: &v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/x", Path: "/abs"}},
			want:   []string{"policy.stageOut.path: Invalid value"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render.Job(tc.job, tc.policy, opts)
			if err == nil {
				t.Fatal("render.Job succeeded, want an error")
			}
			msg := strings.Join(render.Problems(err), "\n")
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
		})
	}
}

// A cluster that allows file:// (kdefer-controller --allow-file-urls) renders
// it.
func TestRenderAllowsFileURLsWhenTold(t *testing.T) {
	job := rt.MakeJob("j", ns).StageOut("file:///data/{pod}/").Annotation(v1.AnnotationStageIn, "file:///data/in/").Obj()
	allow := opts
	allow.AllowFileURLs = true
	if _, err := render.Job(job, nil, allow); err != nil {
		t.Errorf("render.Job with AllowFileURLs: %v", err)
	}
	_, err := render.Job(job, nil, opts)
	if got := strings.Join(render.Problems(err), "\n"); !strings.Contains(got, "policy.stageIn[0].url: Forbidden") {
		t.Errorf("render.Job without AllowFileURLs: want stageIn[0] refused too, got:\n%s", got)
	}
}

func TestWarnings(t *testing.T) {
	j := rt.MakeJob("j", ns).StageOut("s3://b/shared/").Parallelism(4, 8).Annotation("kdefer.io/tigger", "all").Obj()
	want := []string{
		"annotation kdefer.io/tigger is not a kdefer annotation and is ignored; did you mean kdefer.io/triggers?",
		"annotation kdefer.io/stage-out: " + v1.StageOutCollision("s3://b/shared/"),
	}
	if diff := cmp.Diff(want, render.Warnings(j)); diff != "" {
		t.Errorf("Warnings (-want +got):\n%s", diff)
	}
	retried := rt.MakeJob("j", ns).Indexed(4, 4).StageOut("s3://b/{index}/").Obj()
	retried.Spec.BackoffLimitPerIndex = ptr[int32](2)
	// v1.StageOutCollision covers an index's retries too (one rule).
	want = []string{"annotation kdefer.io/stage-out: " + v1.StageOutCollision("s3://b/{index}/")}
	if diff := cmp.Diff(want, render.Warnings(retried)); diff != "" {
		t.Errorf("Warnings of an Indexed Job retried per index (-want +got):\n%s", diff)
	}
	retried.Annotations[v1.AnnotationStageOut] = "s3://b/{index}/{uid}/"
	if w := render.Warnings(retried); len(w) != 0 {
		t.Errorf("Warnings with {uid}: %q", w)
	}
}

// TestPolicyWarningsRuleURL: a trigger rule's url is warned about as
// stageOut.url is, but for one used for Succeeded alone, the prefix a
// pipeline's next Job stages in from.
func TestPolicyWarningsRuleURL(t *testing.T) {
	p := &v1.DeferPolicySpec{StageOut: &v1.StageOut{URL: "s3://b/{job}/attempts/{pod}/"}, TriggerRules: []v1.TriggerRule{
		{Triggers: []v1.Trigger{v1.TriggerSucceeded}, URL: "s3://b/{namespace}/{job}/output/"},
		{Triggers: []v1.Trigger{v1.TriggerFailed, v1.TriggerSucceeded}, URL: "s3://b/{job}/ended/"},
		{Triggers: []v1.Trigger{v1.TriggerOOMKilled}, URL: "s3://b/{job}/oom/{uid}/"},
	}}
	want := []string{"spec.triggerRules[1].url: " + v1.StageOutCollision("s3://b/{job}/ended/")}
	if diff := cmp.Diff(want, render.PolicyWarnings(p)); diff != "" {
		t.Errorf("PolicyWarnings (-want +got):\n%s", diff)
	}
	p.StageOut.Overwrite = true
	if w := render.PolicyWarnings(p); len(w) != 0 {
		t.Errorf("PolicyWarnings with overwrite: %q", w)
	}
}

// TestWarningsCollidingAttempts: a stage-out URL is unique per pod attempt
// only with {pod} or {uid}. A retried pod (backoffLimit, even in a one-pod
// Job) and a retried index get new pod names but the same job name and
// index, so {job} or {index} alone make a later attempt collide with an
// earlier one.
func TestWarningsCollidingAttempts(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		indexed   bool
		want      string // in the warning, "" for none
	}{
		{"one pod, job only: its retries collide", "s3://b/{namespace}/{job}/", false, "every pod of the Job and every retry"},
		{"indexed, index only: an index's retries collide", "s3://b/{job}/{index}/", true, "every retry of an index"},
		{"pod", "s3://b/{job}/{index}/{pod}/", true, ""},
		{"uid", "s3://b/{job}/{uid}/", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jw := rt.MakeJob("j", ns).StageOut(tc.url)
			if tc.indexed {
				jw.Indexed(4, 2)
			}
			w := render.Warnings(jw.Obj())
			switch {
			case tc.want == "" && len(w) != 0:
				t.Errorf("unexpected warnings %q", w)
			case tc.want != "" && (len(w) != 1 || !strings.Contains(w[0], tc.want) || !strings.Contains(w[0], "stageOut.overwrite")):
				t.Errorf("warnings %q: want one saying %q and naming the opt-in", w, tc.want)
			}
		})
	}
}

func FuzzRender(f *testing.F) {
	f.Add(0, "s3://b/{pod}/", "work", "", "s3://in/", "minio", "all", "/kdefer")
	f.Add(1, "s3://b/{index}/", "scratch", "/scratch", "s3://in/{index}/,file:///x", "", "Succeeded", "/out")
	f.Add(2, "gs://b/x", "data", "/data", "", "s", "OOMKilled,Evicted", "/data")
	f.Add(3, "mem://b/", "kdefer-stage-in", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, shape int, out, vol, mount, in, creds, triggers, workMount string) {
		j := rt.MakeJob("fz", ns).StageOut(out)
		if shape%4 == 1 {
			j.Indexed(4, 2)
		}
		if mount != "" && vol != "" {
			j.EmptyDir(vol, mount)
		}
		if shape%3 == 2 {
			j.InitContainer(corev1.Container{Name: "side", Image: "x", RestartPolicy: always()})
		}
		for k, v := range map[string]string{v1.AnnotationWorkVolume: vol, v1.AnnotationStageIn: in, v1.AnnotationCredentials: creds,
			v1.AnnotationTriggers: triggers, v1.AnnotationWorkMountPath: workMount} {
			if v != "" {
				j.Annotation(k, v)
			}
		}
		job := j.Obj()
		got, err := render.Job(job, nil, opts)
		if err != nil {
			if len(render.Problems(err)) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			return
		}
		again, err := render.Job(got, nil, opts)
		if err != nil {
			t.Fatalf("rendering a rendered Job failed: %v", err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("not idempotent (-once +twice):\n%s", diff)
		}
	})
}
