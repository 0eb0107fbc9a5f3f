//go:build e2e

// The local cluster's own acceptance test: what kdefer's e2e tier relies on.
// Run it with a cluster up:
//
//	make cluster-up && go test -tags e2e ./test/clusterenv/ && make cluster-down
package clusterenv_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kdefer/kdefer/test/clusterenv"
)

// TestJobWithEphemeralVolumeReachesHost: a Job's pod writes into a generic
// ephemeral volume bound to a local PV and fetches from a server on the host.
// (Debian 12's busybox-static 1.35 segfaults on `wget -T N`: bound wget with
// `timeout N` instead.)
func TestJobWithEphemeralVolumeReachesHost(t *testing.T) {
	env := clusterenv.Require(t)
	ctx := context.Background()
	ns := env.Namespace(t, "cluster-job")
	base := clusterenv.ServeOnNode(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello-from-host")
	}))

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name:            "main",
					Image:           clusterenv.MustImage(t, "busybox"),
					ImagePullPolicy: corev1.PullIfNotPresent,
					Command: []string{"sh", "-c", "echo payload > /work/out.txt && cat /work/out.txt && " +
						"timeout 10 wget -q -O - " + base + "/ && echo"},
					VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}},
				}},
				Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{
					Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
						Spec: corev1.PersistentVolumeClaimSpec{
							AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
							StorageClassName: ptr.To(clusterenv.StorageClass),
							Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
								corev1.ResourceStorage: resource.MustParse("1Gi"),
							}},
						},
					}},
				}}},
			}},
		},
	}
	start := time.Now()
	if _, err := env.Clientset.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods *corev1.PodList
	if err := clusterenv.WaitFor(ctx, 90*time.Second, "Job "+ns+"/writer to complete", func(ctx context.Context) (bool, error) {
		j, err := env.Clientset.BatchV1().Jobs(ns).Get(ctx, "writer", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("job failed: %s", c.Message)
			}
		}
		return j.Status.Succeeded == 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("job complete after %s", time.Since(start).Round(time.Millisecond))
	pods, err := env.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=writer"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("job pods: %v %v", pods, err)
	}
	pod := pods.Items[0]
	logs, err := env.PodLogs(ctx, ns, pod.Name, "main")
	if err != nil {
		t.Fatalf("logs: %v", err)
	}
	if !strings.Contains(logs, "payload") || !strings.Contains(logs, "hello-from-host") {
		t.Fatalf("unexpected logs %q", logs)
	}

	// The claim is bound to a pre-created local PV holding the file.
	pvc, err := env.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pod.Name+"-work", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvName := pvc.Spec.VolumeName
	pv, err := env.Clientset.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(pv.Spec.Local.Path, "out.txt")); err != nil || string(b) != "payload\n" {
		t.Fatalf("PV %s content: %q %v", pvName, b, err)
	}

	// Deleting the Job deletes the pod and its claim; the Retain PV goes
	// Released, and recycling makes it Available and empty again.
	if err := env.Clientset.BatchV1().Jobs(ns).Delete(ctx, "writer", metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationForeground),
	}); err != nil {
		t.Fatal(err)
	}
	if err := clusterenv.WaitFor(ctx, 60*time.Second, "PV "+pvName+" Released", func(ctx context.Context) (bool, error) {
		pv, err := env.Clientset.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == corev1.VolumeReleased, err
	}); err != nil {
		t.Fatal(err)
	}
	n, err := env.RecycleReleasedPVs(ctx)
	if err != nil || n < 1 {
		t.Fatalf("recycle: %d %v", n, err)
	}
	if err := clusterenv.WaitFor(ctx, 30*time.Second, "PV "+pvName+" Available", func(ctx context.Context) (bool, error) {
		pv, err := env.Clientset.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == corev1.VolumeAvailable, err
	}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(pv.Spec.Local.Path); len(entries) != 0 {
		t.Fatalf("recycled PV %s not empty: %v", pvName, entries)
	}
}

func TestEvictionAPI(t *testing.T) {
	env := clusterenv.Require(t)
	ctx := context.Background()
	ns := env.Namespace(t, "cluster-evict")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []corev1.Container{{
				Name:    "main",
				Image:   clusterenv.MustImage(t, "busybox"),
				Command: []string{"sh", "-c", "trap 'exit 143' TERM; while true; do sleep 0.2; done"},
			}},
		},
	}
	if _, err := env.Clientset.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPod(ctx, ns, "sleeper", 60*time.Second, "Running", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning
	}); err != nil {
		t.Fatal(err)
	}
	if err := env.Evict(ctx, ns, "sleeper"); err != nil {
		t.Fatalf("evict: %v", err)
	}
	p, err := env.Clientset.CoreV1().Pods(ns).Get(ctx, "sleeper", metav1.GetOptions{})
	if err == nil {
		found := false
		for _, c := range p.Status.Conditions {
			found = found || (c.Type == corev1.DisruptionTarget && c.Reason == "EvictionByEvictionAPI")
		}
		if !found {
			t.Errorf("no DisruptionTarget condition after eviction: %v", p.Status.Conditions)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := env.WaitPodGone(ctx, ns, "sleeper", 60*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestWebhookOnHost: the apiserver calls admission webhooks served by a host
// process, by URL, on the node address and on loopback.
func TestWebhookOnHost(t *testing.T) {
	env := clusterenv.Require(t)
	ctx := context.Background()
	ns := env.Namespace(t, "cluster-webhook")
	certPEM, tlsCert := selfSigned(t)
	for _, host := range []string{clusterenv.NodeIP, "127.0.0.1"} {
		t.Run(host, func(t *testing.T) {
			l, err := tls.Listen("tcp", host+":0", &tls.Config{Certificates: []tls.Certificate{tlsCert}})
			if err != nil {
				t.Fatal(err)
			}
			msg := "denied by the host webhook on " + host
			srv := &http.Server{Handler: denyHandler(msg), ReadHeaderTimeout: 5 * time.Second}
			// Serve returns http.ErrServerClosed once the test closes it; a
			// server that fails earlier fails the test by not denying.
			go func() { _ = srv.Serve(l) }()
			defer srv.Close()

			name := "kdefer-cluster-test-" + strings.ReplaceAll(host, ".", "-")
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{{
					Name: "deny.cluster.kdefer.io",
					ClientConfig: admissionregistrationv1.WebhookClientConfig{
						URL:      ptr.To("https://" + l.Addr().String() + "/validate"),
						CABundle: certPEM,
					},
					Rules: []admissionregistrationv1.RuleWithOperations{{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
					}},
					NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
					ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"deny": "true"}},
					FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
					SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
					AdmissionReviewVersions: []string{"v1"},
					TimeoutSeconds:          ptr.To[int32](5),
				}},
			}
			if _, err := env.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := env.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					t.Errorf("delete the webhook configuration %s: %v", name, err)
				}
			}()
			// The apiserver picks the configuration up within a moment.
			var last error
			err = clusterenv.WaitFor(ctx, 30*time.Second, "the apiserver to call the webhook on "+host, func(ctx context.Context) (bool, error) {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns, Labels: map[string]string{"deny": "true"}}}
				created, err := env.Clientset.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
				if err == nil {
					_ = env.Clientset.CoreV1().ConfigMaps(ns).Delete(ctx, created.Name, metav1.DeleteOptions{})
					return false, nil
				}
				last = err
				return strings.Contains(err.Error(), msg), nil
			})
			if err != nil {
				t.Fatalf("%v (last error: %v)", err, last)
			}
		})
	}
}

func denyHandler(msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{
			UID:     review.Request.UID,
			Allowed: false,
			Result:  &metav1.Status{Message: msg, Code: http.StatusForbidden},
		}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		// A failed write is the apiserver's failed call, which it reports.
		_ = json.NewEncoder(w).Encode(review)
	})
}

// selfSigned is a serving certificate for the node address and loopback that is its own CA.
func selfSigned(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kdefer-cluster-test-webhook"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP(clusterenv.NodeIP), net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, pair
}
