package review_test

import (
	"bytes"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/kdefer/kdefer/api/v1alpha1"
	"github.com/kdefer/kdefer/controller/webhook/review"
)

var operations = []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect}

// stable checks that what a decoder made encodes to bytes that decode to
// the same encoding: the webhooks patch with json.Marshal of what they
// decoded, so a decoding that the encoding does not preserve would patch
// the object with something its author never wrote.
func stable[T any](t *testing.T, what string, obj *T) {
	t.Helper()
	// The first encoding may differ from what was decoded: encoding/json
	// writes a string's invalid UTF-8 as \ufffd, which decodes to U+FFFD and
	// is then written as that character. From there on it must be a fixed
	// point: what is stored encodes as it decodes.
	b1, err := json.Marshal(obj)
	if err != nil {
		t.Fatalf("%s: encode what was decoded: %v", what, err)
	}
	b2 := reencode[T](t, what, b1)
	if b3 := reencode[T](t, what, b2); !bytes.Equal(b2, b3) {
		t.Fatalf("%s: encoding not stable:\n%s\n%s", what, b2, b3)
	}
}

// reencode decodes b as a T and encodes it again.
func reencode[T any](t *testing.T, what string, b []byte) []byte {
	t.Helper()
	again := new(T)
	if err := json.Unmarshal(b, again); err != nil {
		t.Fatalf("%s: decode %s again: %v", what, b, err)
	}
	out, err := json.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzDecode feeds admission requests with arbitrary objects to every
// decoder the webhooks use: none panics, each either refuses the bytes with
// an error or returns an object that encodes stably, a Job under review is
// an opted-in Job not being deleted, and every request gets a name for the
// logs.
func FuzzDecode(f *testing.F) {
	job := `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j","labels":{"` + v1.LabelEnabled + `":"true"}},` +
		`"spec":{"template":{"spec":{"containers":[{"name":"main","image":"busybox","resources":{"limits":{"memory":"1Gi"}}}]}}}}`
	seeds := []struct {
		op       uint8
		obj, old string
		ns       string
	}{
		{0, job, "", "default"},
		{1, job, `{"metadata":{"name":"j"},"spec":{"template":{"spec":{"containers":[]}}}}`, "ns"},
		{1, job, job, ""},
		{0, `{"metadata":{"generateName":"p-","labels":{"` + v1.LabelEnabled + `":"true"}},"spec":{"containers":[{"name":"c"}],"activeDeadlineSeconds":9}}`, "", "x"},
		{0, `{"apiVersion":"kdefer.io/v1alpha1","kind":"DeferPolicy","metadata":{"name":"p"},"spec":{"deadline":"30m","stageOut":{"to":"s3://b/x"}}}`, "", "x"},
		{0, `{"metadata":{"name":"w","ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p","uid":"u","controller":true}]},"spec":{"resources":{"requests":{"storage":"1e3"}}}}`, "", "x"},
		{2, `not json`, `{`, ""},
		{0, `{"metadata":{"creationTimestamp":"2026-12-01T00:00:00.123456789Z","deletionTimestamp":"2026-12-01T00:00:00Z"}}`, "", ""},
	}
	for _, s := range seeds {
		f.Add(s.op, []byte(s.obj), []byte(s.old), s.ns)
	}
	f.Fuzz(func(t *testing.T, op uint8, obj, old []byte, ns string) {
		req := &admissionv1.AdmissionRequest{
			Operation: operations[int(op)%len(operations)],
			Namespace: ns,
			Object:    runtime.RawExtension{Raw: obj},
			OldObject: runtime.RawExtension{Raw: old},
		}
		j, check, err := review.Job(req)
		switch {
		case err != nil && (j != nil || check):
			t.Fatalf("Job: error %v with a Job or a review", err)
		case j != nil:
			stable(t, "Job", j)
			if j.Namespace == "" && ns != "" {
				t.Fatalf("Job: namespace left empty, the request's is %q", ns)
			}
			if check && (j.Labels[v1.LabelEnabled] != "true" || j.DeletionTimestamp != nil) {
				t.Fatalf("Job: reviews a Job not opted in or being deleted: %+v", j.ObjectMeta)
			}
		}
		if review.LabelAdded(req, j) && (req.Operation != admissionv1.Update || j.Labels[v1.LabelEnabled] != "true") {
			t.Fatalf("LabelAdded: true for a %s of a Job labelled %q", req.Operation, j.Labels[v1.LabelEnabled])
		}
		if pod, err := review.Pod(req); err == nil {
			stable(t, "Pod", pod)
		}
		if p, err := review.Policy(req); err == nil {
			stable(t, "DeferPolicy", p)
		}
		if pvc, err := review.PVC(req); err == nil {
			stable(t, "PersistentVolumeClaim", pvc)
		}
		if review.Name(req) == "" {
			t.Fatal("Name: empty")
		}
	})
}
