//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
)

// workload describes a main container's script: it writes files
// out/f0.dat.. out/f{n-1}.dat of size bytes each (line "kdefer-e2e file I"
// repeated) and out/SHA256SUMS, signals "ready", then ends per mode.
type workload struct {
	files, size int
	mode        string // "exit N", "wait N" (wait for the go signal, then exit N), "hold" (until killed), "oom", "fill", "pressure KEEP SCRATCH"
}

// stdoutMirrorDir is where a workload's container mirrors what it prints
// (CONTAINER.txt) and keeps its stderr (CONTAINER.stderr), under the work
// volume and so under the stage-out prefix.
const stdoutMirrorDir = "stdout/"

func fileContent(i, size int) []byte {
	line := fmt.Sprintf("kdefer-e2e file %d\n", i)
	return bytes.Repeat([]byte(line), size/len(line)+1)[:size]
}

func (w workload) script(sig string) string {
	var b strings.Builder
	// Everything the container prints goes through say, which writes
	// the line to stdout, then to the volume's mirror of it
	// (stdout/CONTAINER.txt), so checkManifest can compare the archived log
	// with it byte for byte; whatever else a command prints to stderr goes
	// to the volume alone.
	fmt.Fprintf(&b, `trap 'exit 143' TERM
set -e
mkdir -p /kdefer/out /kdefer/%[1]s
exec 2>>/kdefer/%[1]smain.stderr
say() { echo "$*"; echo "$*" >>/kdefer/%[1]smain.txt; }
say "pod $HOSTNAME starts"
`, stdoutMirrorDir)
	fmt.Fprintf(&b, `i=0
while [ $i -lt %d ]; do yes "kdefer-e2e file $i" | head -c %d > /kdefer/out/f$i.dat; i=$((i+1)); done
cd /kdefer/out && sha256sum f*.dat > SHA256SUMS && cd /
timeout 30 wget -q -O /dev/null %s/ready/$HOSTNAME
say "outputs written"
`, w.files, w.size, sig)
	f := strings.Fields(w.mode)
	switch f[0] {
	case "exit":
		fmt.Fprintf(&b, "exit %s\n", f[1])
	case "wait":
		fmt.Fprintf(&b, "timeout 600 wget -q -O /dev/null %s/go/$HOSTNAME & wait $!\nexit %s\n", sig, f[1])
	case "hold":
		// A line every 50 ms until killed: the last is written within
		// 100 ms of the kill, and must be in the archived log too.
		b.WriteString("n=0; while :; do say \"tick $n\"; n=$((n+1)); sleep 0.05; done\n")
	case "oom": // the main process itself exceeds the memory limit
		// A string doubled by the shell itself, so the pages are touched
		// from user space and the memory cgroup's OOM killer always fires.
		// dd reading /dev/zero into a 256M buffer touched them inside
		// read(2), where a charge over the limit can end the read short
		// instead: dd then wrote what it got and exited 0, and the pod
		// Succeeded (seen once, in a cold CI run on a loaded machine).
		b.WriteString("x=kdefer; while :; do x=$x$x; done\n")
	case "fill": // the container's writable layer exceeds its ephemeral-storage limit
		b.WriteString("dd if=/dev/zero of=/tmp/fill bs=1M count=24\nwhile :; do sleep 3600 & wait $!; done\n")
	case "pressure": // the node's file system (TestDiskPressure), then held until killed
		// fallocate takes the blocks without writing them: instant, and
		// the host pays nothing for the loop-mounted image's sparse file.
		fmt.Fprintf(&b, `avail=$(df -Pk /kdefer | awk 'NR==2 {print $4}')
say "node file system: $avail KiB available; leaving %[1]s KiB in the work volume, then %[2]s KiB in /scratch"
fallocate -l $(((avail - %[1]s) * 1024)) /kdefer/fill.bin
fallocate -l $((%[2]s * 1024)) /scratch/fill.bin
say "node file system: $(df -Pk /kdefer | awk 'NR==2 {print $4}') KiB available"
while :; do sleep 3600 & wait $!; done
`, f[1], f[2])
	default:
		panic("workload mode " + w.mode)
	}
	return b.String()
}

// Jobs of the scenarios run as this user and group, not root: their
// namespaces enforce Pod Security "restricted".
const jobUser int64 = 1000

// restrictedPod makes a Job's pod meet Pod Security "restricted" as uid:gid;
// the pod's fsGroup lets it write the work volume (a local PV, which the
// kubelet gives to that group).
func restrictedPod(spec *corev1.PodSpec, uid, gid, fsGroup int64) {
	spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(gid), FSGroup: ptr.To(fsGroup),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	for i := range spec.Containers {
		spec.Containers[i].SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
}

// job builds an opted-in Job running w, staging out to the scenario's bucket.
func (s *scenario) job(name string, w workload) *batchv1.Job {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: s.ns,
			Labels: map[string]string{v1.LabelEnabled: "true"},
			Annotations: map[string]string{
				v1.AnnotationStageOut:    s.stageOutURL(),
				v1.AnnotationCredentials: "minio",
			},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template:     corev1.PodTemplateSpec{Spec: s.podSpec("main", w.script(s.sig.url))},
		},
	}
	return job
}

// podSpec is the spec of every scenario's workload pod: one busybox
// container named container running script, meeting Pod Security
// "restricted" as jobUser.
func (s *scenario) podSpec(container, script string) corev1.PodSpec {
	spec := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](10),
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		Containers: []corev1.Container{{
			Name: container, Image: clusterenv.MustImage(s.t, "busybox"), ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sh", "-c", script},
		}},
	}
	restrictedPod(&spec, jobUser, jobUser, jobUser)
	return spec
}

func (s *scenario) s3Query() string {
	return "?endpoint=http://" + s.s3 + "&use_path_style=true&region=us-east-1"
}

func (s *scenario) stageOutURL() string {
	return "s3://" + bucket + "/{namespace}/{job}/{pod}/" + s.s3Query()
}

func (s *scenario) create(obj client.Object) {
	s.t.Helper()
	if err := s.env.Client.Create(s.ctx, obj); err != nil {
		s.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}
