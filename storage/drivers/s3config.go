package drivers

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"gopkg.in/ini.v1"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// s3Config is what the s3:// backend connects with. Each setting comes from
// the first source that sets it, in this order (docs/stage.md, "S3 settings"): the
// URL parameter (a DeferPolicy's spec.s3 is rendered into it), the standard
// AWS environment variable, the profile (AWS_PROFILE, else "default") of the
// shared config file (AWS_CONFIG_FILE, else ~/.aws/config), kdefer's default.
type s3Config struct {
	host     string
	secure   bool
	region   string
	lookup   minio.BucketLookupType
	checksum string // one of stagecontract.S3Checksums
	caBundle string // "" means the system roots only
}

func resolveS3Config(q url.Values) (s3Config, error) {
	p, err := stagecontract.ParseS3Query(q)
	if err != nil {
		var pe *stagecontract.ParamError
		if errors.As(err, &pe) {
			return s3Config{}, storage.Permanentf(pe.Fix, "%s", pe.Error())
		}
		return s3Config{}, storage.Permanentf("fix the URL parameters", "%v", err)
	}
	prof, err := sharedConfigProfile()
	if err != nil {
		return s3Config{}, err
	}
	c := s3Config{host: "s3.amazonaws.com", secure: true, lookup: minio.BucketLookupAuto, checksum: stagecontract.S3ChecksumCRC32C}

	endpoint, from := p.Endpoint, stagecontract.S3Endpoint+"="
	if endpoint == "" && !envTrue("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") {
		endpoint, from = firstSet(
			[2]string{os.Getenv("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"},
			[2]string{os.Getenv("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"},
			[2]string{prof["endpoint_url"], "endpoint_url in the AWS config file"})
		if endpoint != "" {
			if endpoint, err = stagecontract.NormalizeS3Endpoint(endpoint, p.DisableHTTPS); err != nil {
				return s3Config{}, storage.Permanentf("set "+from+" to http://host:port or https://host", "%s: %v", from, err)
			}
		}
	}
	if endpoint != "" {
		u, _ := url.Parse(endpoint) // normalised: cannot fail
		c.host, c.secure = u.Host, u.Scheme == "https"
	} else if p.DisableHTTPS {
		c.secure = false
	}

	c.region, _ = firstSet(
		[2]string{p.Region}, [2]string{os.Getenv("AWS_REGION")}, [2]string{os.Getenv("AWS_DEFAULT_REGION")}, [2]string{prof["region"]})
	if c.region == "" && endpoint != "" {
		c.region = "us-east-1" // S3-compatible servers (MinIO, Ceph) default to it
	}

	if p.PathStyle != nil {
		c.lookup = minio.BucketLookupDNS
		if *p.PathStyle {
			c.lookup = minio.BucketLookupPath
		}
	}

	switch {
	case p.Checksum != "":
		c.checksum = p.Checksum
	case strings.EqualFold(os.Getenv("AWS_REQUEST_CHECKSUM_CALCULATION"), "when_required"):
		// The AWS SDKs' switch for servers without flexible checksums:
		// PutObject requires none.
		c.checksum = stagecontract.S3ChecksumNone
	}

	c.caBundle, _ = firstSet([2]string{p.CABundle}, [2]string{os.Getenv("AWS_CA_BUNDLE")}, [2]string{prof["ca_bundle"]})
	return c, nil
}

// firstSet returns the first non-empty value and its source's name.
func firstSet(vals ...[2]string) (string, string) {
	for _, v := range vals {
		if v[0] != "" {
			return v[0], v[1]
		}
	}
	return "", ""
}

func envTrue(name string) bool {
	b, _ := strconv.ParseBool(os.Getenv(name))
	return b
}

// sharedConfigProfile returns the keys of the AWS config file's profile;
// none when there is no file. The credentials in it and in the shared
// credentials file are minio-go's FileAWSCredentials' to read.
func sharedConfigProfile() (map[string]string, error) {
	name := os.Getenv("AWS_CONFIG_FILE")
	if name == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, nil
		}
		name = filepath.Join(home, ".aws", "config")
	}
	f, err := ini.Load(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, storage.Permanentf("fix the file, or point AWS_CONFIG_FILE at another", "read AWS config file %s: %v", name, err)
	}
	profile := os.Getenv("AWS_PROFILE")
	section := "profile " + profile
	if profile == "" || profile == "default" {
		section = "default"
	}
	s, err := f.GetSection(section)
	if err != nil {
		return nil, nil // a profile only in the credentials file
	}
	return s.KeysHash(), nil
}

// transport is the HTTP transport of one backend; its TLS trusts the
// system roots plus the CA bundle.
func (c s3Config) transport(opts storage.OpenOptions) (*http.Transport, error) {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           idleDialer(opts.IdleTimeout),
		MaxIdleConns:          2 * opts.Concurrency,
		MaxIdleConnsPerHost:   2 * opts.Concurrency,
		IdleConnTimeout:       30 * time.Second, // below the idle timeout
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		ExpectContinueTimeout: time.Second,
		// Object data is already compressed or incompressible; gzip would
		// only cost CPU. 64 KiB socket buffers cut syscalls for large bodies.
		DisableCompression: true,
		WriteBufferSize:    64 << 10,
		ReadBufferSize:     64 << 10,
		ForceAttemptHTTP2:  false,
	}
	if c.caBundle != "" {
		pem, err := os.ReadFile(c.caBundle)
		if err != nil {
			return nil, storage.Permanentf("mount the CA bundle at that path (DeferPolicy spec.s3.caBundle), or fix ca_bundle= / AWS_CA_BUNDLE",
				"read CA bundle: %v", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, storage.Permanentf("give a file of PEM certificates (-----BEGIN CERTIFICATE-----)",
				"CA bundle %s holds no PEM certificate", c.caBundle)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return tr, nil
}

// credentials are the standard AWS sources, in the AWS order: environment
// (MinIO's own names too), the shared credentials and config files
// (AWS_PROFILE), then the pod's identity: a web identity token file
// (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, exchanged at
// AWS_ENDPOINT_URL_STS or the region's STS), the ECS/EKS container
// endpoint, the EC2 instance role. STS is reached through tr, so it trusts
// the CA bundle too.
func (c s3Config) credentials(tr *http.Transport) *credentials.Credentials {
	iam := &credentials.IAM{Client: &http.Client{Transport: tr}, Region: c.region}
	if os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE") != "" && !envTrue("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") {
		// Only for web identity: IAM's Endpoint also replaces the
		// instance metadata address.
		iam.Endpoint = os.Getenv("AWS_ENDPOINT_URL_STS")
	}
	chain := &credentials.Chain{Providers: []credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.EnvMinio{},
		&credentials.FileAWSCredentials{},
		iam,
	}}
	if os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE") == "" {
		return credentials.New(chain)
	}
	return credentials.New(&webIdentityChain{Chain: chain, iam: iam})
}
