package v1alpha1

import (
	"net/url"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Web identity (spec.webIdentity): where the stage steps find the token,
// and the defaults of its projection.
const (
	// WebIdentityTokenFile is where kdefer's stage steps find their
	// projected token (AWS_WEB_IDENTITY_TOKEN_FILE,
	// AZURE_FEDERATED_TOKEN_FILE).
	WebIdentityTokenFile = "/var/run/kdefer/web-identity/token"
	// DefaultS3Audience is the audience AWS STS expects of an IRSA token.
	DefaultS3Audience = "sts.amazonaws.com"
	// DefaultAzureAudience is the audience Entra ID expects of a federated
	// workload identity token.
	DefaultAzureAudience = "api://AzureADTokenExchange"
	// DefaultWebIdentityExpirationSeconds is the token's default lifetime.
	DefaultWebIdentityExpirationSeconds int64 = 3600
	// minWebIdentityExpirationSeconds is the least the apiserver issues.
	minWebIdentityExpirationSeconds int64 = 600
	// maxWebIdentityExpirationSeconds bounds what a policy may ask for.
	maxWebIdentityExpirationSeconds int64 = 86400
)

// TokenAudience is the audience of the token: the one set, else the
// default of the provider.
func (w *WebIdentity) TokenAudience() string {
	switch {
	case w.Audience != "":
		return w.Audience
	case w.Azure != nil:
		return DefaultAzureAudience
	}
	return DefaultS3Audience
}

// TokenExpirationSeconds is the token's lifetime: the one set, else
// DefaultWebIdentityExpirationSeconds.
func (w *WebIdentity) TokenExpirationSeconds() int64 {
	if w.ExpirationSeconds != nil {
		return *w.ExpirationSeconds
	}
	return DefaultWebIdentityExpirationSeconds
}

// validateIdentity checks serviceAccountName, imagePullSecrets and
// webIdentity, with the rules of the CRD's schema and those it cannot
// state (a credentials Secret beside a web identity).
func validateIdentity(s *DeferPolicySpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if n := s.ServiceAccountName; n != "" {
		for _, m := range validation.IsDNS1123Subdomain(n) {
			errs = append(errs, field.Invalid(fld.Child("serviceAccountName"), n, m+"; fix: name a ServiceAccount of the pods' namespace"))
		}
	}
	for i, ref := range s.ImagePullSecrets {
		for _, m := range validation.IsDNS1123Subdomain(ref.Name) {
			errs = append(errs, field.Invalid(fld.Child("imagePullSecrets").Index(i).Child("name"), ref.Name, m+"; fix: name a Secret of type kubernetes.io/dockerconfigjson"))
		}
	}
	w := s.WebIdentity
	if w == nil {
		return errs
	}
	p := fld.Child("webIdentity")
	if (w.S3 == nil) == (w.Azure == nil) {
		errs = append(errs, field.Invalid(p, "", "webIdentity needs exactly one of s3 and azure: set webIdentity.s3.roleARN (AWS, or an S3 server's STS) or webIdentity.azure (clientID, tenantID)"))
	}
	if w.Audience != "" && len(w.Audience) > 253 {
		errs = append(errs, field.TooLong(p.Child("audience"), "", 253))
	}
	if e := w.ExpirationSeconds; e != nil && (*e < minWebIdentityExpirationSeconds || *e > maxWebIdentityExpirationSeconds) {
		errs = append(errs, field.Invalid(p.Child("expirationSeconds"), *e, "must be between 600 (the least the apiserver issues) and 86400"))
	}
	if a := w.S3; a != nil {
		if a.RoleARN == "" {
			errs = append(errs, field.Required(p.Child("s3", "roleARN"), "the role the token is exchanged for: set it to the IAM role's ARN (or the S3 server's role ARN)"))
		}
		if e := a.STSEndpoint; e != "" {
			if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, field.Invalid(p.Child("s3", "stsEndpoint"), e, "must be an http:// or https:// URL with a host, e.g. https://sts.eu-west-1.amazonaws.com"))
			}
		}
	}
	if a := w.Azure; a != nil {
		if a.ClientID == "" {
			errs = append(errs, field.Required(p.Child("azure", "clientID"), "the client ID of the identity whose federated credential admits the token"))
		}
		if a.TenantID == "" {
			errs = append(errs, field.Required(p.Child("azure", "tenantID"), "the Entra ID tenant of that identity"))
		}
	}
	if s.Credentials != nil {
		errs = append(errs, field.Invalid(fld.Child("credentials"), s.Credentials.Name,
			"a credentials Secret and webIdentity both give the stage steps credentials, and the Secret's would win: remove one (the Secret, or the annotation "+AnnotationCredentials+" on the Job)"))
	}
	return errs
}
