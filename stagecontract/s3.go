package stagecontract

import (
	"fmt"
	"maps"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The s3:// URL parameters: kdefer-stage connects with them, admission
// (webhook, `kdefer lint`) refuses a URL whose parameters ParseS3Query
// refuses, so a bad switch fails before a pod runs, with the same message.
const (
	S3Endpoint     = "endpoint"       // scheme://host[:port] of an S3-compatible server
	S3Region       = "region"         // signing region
	S3PathStyle    = "use_path_style" // true: path style; false: virtual-host style; unset: by endpoint
	S3DisableHTTPS = "disable_https"  // http:// for an endpoint given without a scheme
	S3Checksum     = "checksum"       // S3ChecksumCRC32C (default), S3ChecksumMD5 or S3ChecksumNone
	S3CABundle     = "ca_bundle"      // absolute path of a PEM file of extra trusted CAs
)

// S3 upload checksum modes (parameter checksum=).
const (
	// S3ChecksumCRC32C streams a CRC32C in an aws-chunked trailer, which
	// the server verifies (the default, one read of each file).
	S3ChecksumCRC32C = "crc32c"
	// S3ChecksumMD5 sends Content-MD5, which every S3 server verifies;
	// it costs a second read of each file before it is sent.
	S3ChecksumMD5 = "md5"
	// S3ChecksumNone sends no checksum, for servers that reject both;
	// the manifest's CRC32C is still computed and checked on stage-in.
	S3ChecksumNone = "none"
)

// S3Params are all the s3:// URL parameters, in documentation order.
var S3Params = []string{S3Endpoint, S3Region, S3PathStyle, S3DisableHTTPS, S3Checksum, S3CABundle}

// S3Checksums are the values of checksum=.
var S3Checksums = []string{S3ChecksumCRC32C, S3ChecksumMD5, S3ChecksumNone}

// S3Query is a parsed s3:// query. Empty fields were not given; kdefer-stage
// then looks at the AWS environment and config file.
type S3Query struct {
	// Endpoint is scheme://host[:port], the scheme filled in.
	Endpoint string
	Region   string
	// PathStyle is nil when unset (the client picks by endpoint).
	PathStyle    *bool
	DisableHTTPS bool
	// Checksum is one of S3Checksums, or "".
	Checksum string
	CABundle string
}

// ParamError is a refused URL parameter: which, what is wrong and the fix.
// It never holds credentials: an endpoint with userinfo is not echoed.
type ParamError struct {
	Param, Value, Problem, Fix string
}

func (e *ParamError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("s3 URL parameter %q %s", e.Param, e.Problem)
	}
	return fmt.Sprintf("s3 URL parameter %s=%q %s", e.Param, e.Value, e.Problem)
}

var regionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ParseS3Query checks an s3:// URL's parameters and returns them; the error
// is a *ParamError.
func ParseS3Query(q url.Values) (S3Query, error) {
	var out S3Query
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(S3Params, k) {
			return S3Query{}, &ParamError{Param: k, Problem: "is unknown", Fix: "remove it; s3:// accepts " + strings.Join(S3Params, ", ")}
		}
		if len(q[k]) > 1 {
			return S3Query{}, &ParamError{Param: k, Problem: "is given more than once", Fix: "give it once"}
		}
	}
	boolParam := func(name string) (*bool, error) {
		v := q.Get(name)
		if v == "" {
			return nil, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, &ParamError{Param: name, Value: v, Problem: "is not a boolean", Fix: "use " + name + "=true or false"}
		}
		return &b, nil
	}
	var err error
	if out.PathStyle, err = boolParam(S3PathStyle); err != nil {
		return S3Query{}, err
	}
	noTLS, err := boolParam(S3DisableHTTPS)
	if err != nil {
		return S3Query{}, err
	}
	out.DisableHTTPS = noTLS != nil && *noTLS
	if ep := q.Get(S3Endpoint); ep != "" {
		if out.Endpoint, err = NormalizeS3Endpoint(ep, out.DisableHTTPS); err != nil {
			return S3Query{}, err
		}
	}
	if r := q.Get(S3Region); r != "" {
		if !regionRE.MatchString(r) {
			return S3Query{}, &ParamError{Param: S3Region, Value: r, Problem: "is not a region name", Fix: "use the bucket's region, e.g. region=us-east-1"}
		}
		out.Region = r
	}
	if c := q.Get(S3Checksum); c != "" {
		if !slices.Contains(S3Checksums, strings.ToLower(c)) {
			return S3Query{}, &ParamError{Param: S3Checksum, Value: c, Problem: "is not a checksum mode",
				Fix: "use checksum=" + strings.Join(S3Checksums, ", checksum=") + " (none for servers that reject both)"}
		}
		out.Checksum = strings.ToLower(c)
	}
	if ca := q.Get(S3CABundle); ca != "" {
		if !path.IsAbs(ca) || path.Clean(ca) != ca {
			return S3Query{}, &ParamError{Param: S3CABundle, Value: ca, Problem: "is not a clean absolute path",
				Fix: "name the PEM file in the stage step, e.g. ca_bundle=/etc/ssl/certs/site-ca.pem, or set spec.s3.caBundle in the DeferPolicy"}
		}
		out.CABundle = ca
	}
	return out, nil
}

// NormalizeS3Endpoint checks an endpoint (from the URL or the AWS
// environment) and returns it as scheme://host[:port]; one without a scheme
// is https, or http with disableHTTPS.
func NormalizeS3Endpoint(ep string, disableHTTPS bool) (string, error) {
	raw := ep
	if !strings.Contains(ep, "://") {
		ep = "https://" + ep
		if disableHTTPS {
			ep = "http://" + strings.TrimPrefix(ep, "https://")
		}
	}
	u, err := url.Parse(ep)
	if err == nil && u.User != nil {
		return "", &ParamError{Param: S3Endpoint, Problem: "holds credentials", Fix: "remove them; credentials come from the AWS environment or files"}
	}
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		if strings.Contains(raw, "@") {
			raw = "" // may hold credentials: do not echo it
		}
		return "", &ParamError{Param: S3Endpoint, Value: raw,
			Problem: "is not a URL of the form scheme://host[:port]", Fix: "use endpoint=http://host:port or endpoint=https://host"}
	}
	return u.Scheme + "://" + u.Host, nil
}
