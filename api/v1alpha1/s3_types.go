package v1alpha1

import (
	"errors"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kdefer/kdefer/stagecontract"
)

// S3Settings are S3-compatibility switches for the policy's s3:// stage
// URLs. Render passes each to the stage steps as the URL parameter of the
// same meaning (docs/stage.md#s3-settings); a parameter the URL sets itself wins.
// +kubebuilder:validation:MinProperties=1
type S3Settings struct {
	// checksum is how uploads are checksummed: CRC32C (the default, an
	// aws-chunked trailer the server verifies), MD5 (Content-MD5, for
	// servers that reject trailers; each file is read twice) or None (for
	// servers that reject both; the manifest's CRC32C still covers stage-in).
	// +optional
	// +kubebuilder:validation:Enum=CRC32C;MD5;None
	Checksum S3Checksum `json:"checksum,omitempty"`

	// addressingStyle is Path (endpoint/bucket/key) or VirtualHost
	// (bucket.endpoint/key); by default the client picks virtual-host style
	// for AWS and path style for other endpoints.
	// +optional
	// +kubebuilder:validation:Enum=Path;VirtualHost
	AddressingStyle S3AddressingStyle `json:"addressingStyle,omitempty"`

	// region is the signing region (default: AWS_REGION or the AWS config
	// file in the credentials Secret's environment, else us-east-1 for a
	// custom endpoint).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Region string `json:"region,omitempty"`

	// caBundle is a key of a Secret or ConfigMap in the pod's namespace
	// holding PEM certificates to trust besides the system's (a site CA).
	// It is mounted into the stage steps only.
	// +optional
	CABundle *CABundleSource `json:"caBundle,omitempty"`
}

// CABundleSource names the key that holds a CA bundle: exactly one of
// secretKeyRef and configMapKeyRef.
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) != has(self.configMapKeyRef)",message="caBundle needs exactly one of secretKeyRef and configMapKeyRef"
type CABundleSource struct {
	// secretKeyRef selects a key of a Secret.
	// +optional
	SecretKeyRef *corev1.SecretKeySelector `json:"secretKeyRef,omitempty"`

	// configMapKeyRef selects a key of a ConfigMap.
	// +optional
	ConfigMapKeyRef *corev1.ConfigMapKeySelector `json:"configMapKeyRef,omitempty"`
}

// S3Checksum is an upload checksum mode.
type S3Checksum string

// S3 checksum modes.
const (
	S3ChecksumCRC32C S3Checksum = "CRC32C"
	S3ChecksumMD5    S3Checksum = "MD5"
	S3ChecksumNone   S3Checksum = "None"
)

// S3AddressingStyle is how a bucket is addressed.
type S3AddressingStyle string

// S3 addressing styles.
const (
	S3AddressingPath        S3AddressingStyle = "Path"
	S3AddressingVirtualHost S3AddressingStyle = "VirtualHost"
)

// S3CABundleFile is where the stage steps find spec.s3.caBundle.
const S3CABundleFile = "/var/run/kdefer/s3-ca/ca.pem"

// URLParams returns the s3:// URL parameters the settings stand for.
func (s *S3Settings) URLParams() url.Values {
	q := url.Values{}
	if s == nil {
		return q
	}
	if s.Checksum != "" {
		q.Set(stagecontract.S3Checksum, strings.ToLower(string(s.Checksum)))
	}
	switch s.AddressingStyle {
	case S3AddressingPath:
		q.Set(stagecontract.S3PathStyle, "true")
	case S3AddressingVirtualHost:
		q.Set(stagecontract.S3PathStyle, "false")
	}
	if s.Region != "" {
		q.Set(stagecontract.S3Region, s.Region)
	}
	if s.CABundle != nil {
		q.Set(stagecontract.S3CABundle, S3CABundleFile)
	}
	return q
}

// StageURLWithS3 returns an s3:// stage URL with the policy's S3 settings
// added as the parameters it does not set itself; other URLs unchanged.
func StageURLWithS3(raw string, s *S3Settings) string {
	if s == nil || !strings.HasPrefix(raw, "s3://") {
		return raw
	}
	base, query, _ := strings.Cut(raw, "?")
	have, err := url.ParseQuery(query)
	if err != nil {
		return raw // CheckStageURL refuses it before a pod runs
	}
	for k, v := range s.URLParams() {
		if !have.Has(k) {
			have[k] = v
		}
	}
	return base + "?" + have.Encode()
}

// s3SettingsField maps a URL parameter to the settings field it comes from.
var s3SettingsField = map[string]string{
	stagecontract.S3Checksum:  "checksum",
	stagecontract.S3PathStyle: "addressingStyle",
	stagecontract.S3Region:    "region",
	stagecontract.S3CABundle:  "caBundle",
}

// validateS3Settings checks spec.s3 with the rule kdefer-stage applies to
// the URL parameters it becomes (stagecontract.ParseS3Query).
func validateS3Settings(s *S3Settings, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if _, err := stagecontract.ParseS3Query(s.URLParams()); err != nil {
		var pe *stagecontract.ParamError
		if errors.As(err, &pe) {
			errs = append(errs, field.Invalid(fld.Child(s3SettingsField[pe.Param]), pe.Value, pe.Problem+"; fix: "+pe.Fix))
		} else {
			errs = append(errs, field.Invalid(fld, "", err.Error()))
		}
	}
	if ca := s.CABundle; ca != nil {
		p := fld.Child("caBundle")
		var name, key string
		switch {
		case (ca.SecretKeyRef == nil) == (ca.ConfigMapKeyRef == nil):
			return append(errs, field.Invalid(p, "", "caBundle needs exactly one of secretKeyRef and configMapKeyRef"))
		case ca.SecretKeyRef != nil:
			p, name, key = p.Child("secretKeyRef"), ca.SecretKeyRef.Name, ca.SecretKeyRef.Key
		default:
			p, name, key = p.Child("configMapKeyRef"), ca.ConfigMapKeyRef.Name, ca.ConfigMapKeyRef.Key
		}
		for _, m := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, field.Invalid(p.Child("name"), name, m))
		}
		for _, m := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(p.Child("key"), key, m))
		}
	}
	return errs
}
