//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/test/clusterenv"
	"github.com/kdefer/kdefer/test/s3server"
)

// stsAudience is the audience of the scenario's tokens: the client ID of
// its MinIO's OpenID provider, the cluster's service-account issuer.
const stsAudience = "kdefer-e2e-sts"

// TestWebIdentity: cloud identity with a real STS. This scenario's MinIO
// trusts the cluster's own service-account issuer as its OpenID provider
// (role-policy mode: any token for its client ID gets the readwrite policy).
// A DeferPolicy names a ServiceAccount and a web identity and no credentials
// Secret exists in the namespace: the Job's stage-in (its pod takes the
// policy's ServiceAccount) and its defer pod's stage-out each exchange their
// projected token at MinIO's STS for temporary credentials, the inputs
// arrive and every output lands in the bucket; no container of the user's
// mounts the token. A policy whose token has another audience fails its
// run permanently, naming STS's reason, and uploads nothing.
func TestWebIdentity(t *testing.T) {
	t.Parallel()
	env := clusterenv.Require(t)
	ca := issuerDiscovery(t, env)
	srv := s3server.StartWith(t, s3server.Options{Host: clusterenv.NodeIP, CAs: ca, Env: []string{
		"MINIO_IDENTITY_OPENID_CONFIG_URL=" + clusterenv.APIServer + "/.well-known/openid-configuration",
		"MINIO_IDENTITY_OPENID_CLIENT_ID=" + stsAudience,
		"MINIO_IDENTITY_OPENID_ROLE_POLICY=readwrite",
	}})
	s := newScenario(t, "identity", withS3(srv.Addr()))
	// No Secret at all: whatever the steps hold comes from their tokens.
	if err := env.Clientset.CoreV1().Secrets(s.ns).Delete(s.ctx, "minio", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clientset.CoreV1().ServiceAccounts(s.ns).Create(s.ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "stager"}, AutomountServiceAccountToken: ptr.To(false)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The exchange works before any Job relies on it: a token the
	// apiserver issues for stager, accepted by MinIO's STS once its IAM
	// has loaded.
	tr, err := env.Clientset.CoreV1().ServiceAccounts(s.ns).CreateToken(s.ctx, "stager", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{stsAudience}, ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv.WaitWebIdentity(s3server.OpenIDRoleARN(stsAudience), tr.Status.Token)
	input := bytes.Repeat([]byte("event energy=42\n"), 4096)
	if _, err := s.mc.PutObject(s.ctx, bucket, s.ns+"/dataset/event.dat", bytes.NewReader(input), int64(len(input)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	policy := func(name, audience string, stageIn bool) *v1.DeferPolicy {
		p := &v1.DeferPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}, Spec: v1.DeferPolicySpec{
			StageOut:           &v1.StageOut{URL: s.stageOutURL()},
			ServiceAccountName: "stager",
			WebIdentity: &v1.WebIdentity{Audience: audience, S3: &v1.S3WebIdentity{
				RoleARN: s3server.OpenIDRoleARN(stsAudience), STSEndpoint: srv.Endpoint()}},
		}}
		if stageIn {
			p.Spec.StageIn = []v1.StageIn{{URL: "s3://" + bucket + "/" + s.ns + "/dataset/" + s.s3Query()}}
		}
		return p
	}
	job := func(name, pol string) {
		w := small
		w.mode = "exit 0"
		j := s.job(name, w)
		delete(j.Annotations, v1.AnnotationCredentials)
		delete(j.Annotations, v1.AnnotationStageOut)
		j.Annotations[v1.AnnotationPolicy] = pol
		s.create(j)
	}
	s.create(policy("cloud", stsAudience, true))
	s.create(policy("stranger", "not-"+stsAudience, false))

	job("sim", "cloud")
	pod := s.waitReady(2 * time.Minute)
	p, err := env.Clientset.CoreV1().Pods(s.ns).Get(s.ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.ServiceAccountName != "stager" {
		t.Errorf("pod %s runs as ServiceAccount %q, want the policy's stager", pod, p.Spec.ServiceAccountName)
	}
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		mounts := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v1.WebIdentityVolume })
		if mounts != v1.IsStageInContainer(c.Name) {
			t.Errorf("pod %s: container %s mounts the web identity token: %v", pod, c.Name, mounts)
		}
	}
	run := s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunSucceeded, 3*time.Minute)
	s.logf("steps: %s", steps(run))
	w := small
	w.mode = "exit 0"
	objs := s.checkOutputs("sim", pod, w, v1.TriggerSucceeded, "inputs/event.dat")
	if got := objs["inputs/event.dat"].data; !bytes.Equal(got, input) {
		t.Errorf("inputs/event.dat: staged in and out %d bytes, the dataset has %d", len(got), len(input))
	}
	dp, err := env.Clientset.CoreV1().Pods(s.ns).Get(s.ctx, v1.DeferPodName(run), metav1.GetOptions{})
	if err == nil && dp.Spec.ServiceAccountName != "stager" {
		t.Errorf("defer pod %s runs as ServiceAccount %q, want stager", dp.Name, dp.Spec.ServiceAccountName)
	}
	s.volumeReleased(run)

	// The token of another audience: MinIO refuses it.
	job("stranger", "stranger")
	pod = s.waitReady(2 * time.Minute)
	run = s.waitFinished(pod, v1.TriggerSucceeded, v1.DeferRunFailed, 3*time.Minute)
	c := meta.FindStatusCondition(run.Status.Conditions, v1.DeferRunFailed)
	if c == nil || !strings.Contains(c.Message, "web identity") || !strings.Contains(c.Message, "must match configured OpenID Client ID") {
		t.Errorf("Failed condition %+v: want the refused web identity and STS's reason (the audience) named", c)
	} else {
		s.logf("refused: %s", c.Message)
	}
	if objs := s.objects(s.ns + "/stranger/" + pod + "/"); len(objs) > 0 {
		t.Errorf("s3://%s/%s/stranger/%s/ holds %d objects: nothing should have been uploaded", bucket, s.ns, pod, len(objs))
	}
	// A failed run keeps its volume (the policy's default): release it.
	patch := []byte(`{"metadata":{"annotations":{"kdefer.io/release":"true"}}}`)
	if err := env.Client.Patch(s.ctx, run, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	s.volumeReleased(run)
	s.cleanUp("sim", "stranger")
}

// issuerDiscovery lets unauthenticated clients read the cluster's
// service-account issuer discovery (the OpenID configuration and its key
// set), as an OpenID relying party outside the cluster reads them, and
// returns the CA that signs the apiserver's certificate. The binding is
// the one Kubernetes documents for it (ClusterRole
// system:service-account-issuer-discovery), removed when the test ends.
func issuerDiscovery(t *testing.T, env *clusterenv.Env) []byte {
	t.Helper()
	ctx := context.Background()
	const name = "kdefer-e2e-issuer-discovery"
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:unauthenticated"}},
	}
	if _, err := env.Clientset.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Clientset.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	ca := env.Config.CAData
	if len(ca) == 0 {
		var err error
		if ca, err = os.ReadFile(env.Config.CAFile); err != nil {
			t.Fatalf("the apiserver's CA: %v", err)
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	anon := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	err := clusterenv.WaitFor(ctx, 30*time.Second, "anonymous access to the issuer discovery", func(context.Context) (bool, error) {
		for _, p := range []string{"/.well-known/openid-configuration", "/openid/v1/jwks"} {
			resp, err := anon.Get(clusterenv.APIServer + p)
			if err != nil {
				return false, nil //nolint:nilerr // not up yet: try again
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
