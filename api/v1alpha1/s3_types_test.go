package v1alpha1

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// spec.s3 and s3:// URL parameters are checked by kdefer-stage's own rule.
func TestS3SettingsValidation(t *testing.T) {
	spec := func(s3 *S3Settings, url string) *DeferPolicySpec {
		return &DeferPolicySpec{StageOut: &StageOut{URL: url}, S3: s3}
	}
	ok := &S3Settings{Checksum: S3ChecksumNone, AddressingStyle: S3AddressingVirtualHost, Region: "eu-1",
		CABundle: &CABundleSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "site-ca"}, Key: "ca.crt"}}}
	if errs := ValidateDeferPolicySpec(spec(ok, "s3://b/p/?checksum=md5"), field.NewPath("spec")); len(errs) > 0 {
		t.Errorf("valid settings refused: %v", errs)
	}
	for _, tc := range []struct {
		s    *DeferPolicySpec
		want string
	}{
		{spec(nil, "s3://b/p/?checksum=sha1"), `checksum="sha1" is not a checksum mode`},
		{spec(nil, "s3://b/p/?ca_bundle=rel.pem"), "absolute"},
		{spec(&S3Settings{Checksum: "SHA1"}, "s3://b/p/"), "spec.s3.checksum"},
		{spec(&S3Settings{Region: "a b"}, "s3://b/p/"), "spec.s3.region"},
		{spec(&S3Settings{CABundle: &CABundleSource{}}, "s3://b/p/"), "exactly one"},
		{spec(&S3Settings{CABundle: &CABundleSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "Bad_Name"}, Key: "ca"}}}, "s3://b/p/"), "spec.s3.caBundle.secretKeyRef.name"},
	} {
		errs := ValidateDeferPolicySpec(tc.s, field.NewPath("spec"))
		if !strings.Contains(errs.ToAggregate().Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.s.S3, errs, tc.want)
		}
	}
}

func TestStageURLWithS3(t *testing.T) {
	s := &S3Settings{Checksum: S3ChecksumMD5, AddressingStyle: S3AddressingPath, Region: "r1", CABundle: &CABundleSource{SecretKeyRef: &corev1.SecretKeySelector{}}}
	got := StageURLWithS3("s3://b/{pod}/?region=own", s)
	for _, want := range []string{"checksum=md5", "use_path_style=true", "region=own", "ca_bundle=%2Fvar%2Frun%2Fkdefer%2Fs3-ca%2Fca.pem", "s3://b/{pod}/?"} {
		if !strings.Contains(got, want) {
			t.Errorf("StageURLWithS3 = %q, want %q in it (the URL's own region wins)", got, want)
		}
	}
	if got := StageURLWithS3("gs://b/p/", s); got != "gs://b/p/" {
		t.Errorf("a gs:// URL changed: %q", got)
	}
}
