package drivers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kdefer/kdefer/storage"
)

// webIdentityChain is the credential chain of a stage step given a web
// identity token (AWS_WEB_IDENTITY_TOKEN_FILE). minio-go's chain answers
// anonymous when every source fails, so a token STS refuses would surface
// only as the bucket's AccessDenied, naming neither STS nor why. This one
// answers STS's refusal instead, as a webIdentityError.
type webIdentityChain struct {
	*credentials.Chain
	iam *credentials.IAM
}

// RetrieveWithCredContext is the chain's answer, unless that is anonymous:
// then the web identity exchange's own result.
func (c *webIdentityChain) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	v, err := c.Chain.RetrieveWithCredContext(cc)
	if err != nil || v.SignerType != credentials.SignatureAnonymous {
		return v, err
	}
	v, err = c.iam.RetrieveWithCredContext(cc)
	if err == nil && v.AccessKeyID != "" {
		return v, nil
	}
	return credentials.Value{}, newWebIdentityError(c.iam.Endpoint, err)
}

// Retrieve is RetrieveWithCredContext without a context (minio-go's
// deprecated entry point, kept for the Provider interface).
func (c *webIdentityChain) Retrieve() (credentials.Value, error) {
	return c.RetrieveWithCredContext(nil)
}

// webIdentityError is a failed exchange of the stage step's token. A
// refusal by STS (an error response: the token's audience, issuer or
// subject is not what the role trusts, the role does not exist) is
// permanent, and so is a token file that is not there (the kubelet writes
// a projected token before the container starts, so it will not appear
// later); anything else (STS unreachable) may pass.
type webIdentityError struct {
	class storage.Class
	fix   string
	err   error
}

func newWebIdentityError(endpoint string, err error) *webIdentityError {
	if endpoint == "" {
		endpoint = "the region's AWS STS"
	}
	role := os.Getenv("AWS_ROLE_ARN")
	if err == nil {
		err = errors.New("no credentials returned")
	}
	e := &webIdentityError{class: storage.Transient}
	var sts credentials.ErrorResponse
	switch {
	case errors.As(err, &sts):
		e.class, e.fix = storage.Permanent, webIdentityFix
		err = fmt.Errorf("%s (%s)", sts.STSError.Message, sts.STSError.Code)
	case errors.Is(err, fs.ErrNotExist):
		e.class, e.fix = storage.Permanent, tokenFileFix
	}
	e.err = fmt.Errorf("web identity: exchanging the token of %s for role %s at %s: %w",
		os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE"), role, endpoint, err)
	return e
}

func (e *webIdentityError) Error() string { return e.err.Error() }
func (e *webIdentityError) Unwrap() error { return e.err }

// webIdentityFix is what a refused exchange asks of the user.
const webIdentityFix = "make the role trust the token: its issuer (the cluster's service-account issuer), audience (DeferPolicy spec.webIdentity.audience) and subject (system:serviceaccount:NAMESPACE:SERVICEACCOUNT, spec.serviceAccountName); check spec.webIdentity.s3.roleARN"

// tokenFileFix is what a missing token file asks of the user.
const tokenFileFix = "mount the service-account token where AWS_WEB_IDENTITY_TOKEN_FILE points (kdefer projects it when the DeferPolicy sets spec.webIdentity), or unset AWS_WEB_IDENTITY_TOKEN_FILE to use other credentials"
