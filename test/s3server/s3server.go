// Package s3server starts real S3 servers for tests: a MinIO child process
// (from $KDEFER_MINIO) on 127.0.0.1 with a random port and a fresh data
// directory, which a test can kill and restart on the same port and data;
// and versitygw's embedded gateway inside the test process.
//
// It owns starting, killing and faulting (proxy.go) local S3 servers, and
// the test credentials. It must not import kdefer's packages, so any layer's
// tests may use it, and its servers listen on local addresses only
// (127.0.0.1 unless Options.Host names the local cluster's node address).
package s3server

import (
	"bytes"
	"context"
	"crypto/sha1" //nolint:gosec // MinIO derives its role ARN with SHA-1
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Test credentials: the servers are local and short-lived.
const (
	AccessKey = "kdefertest"
	SecretKey = "kdefertest-secret-key"
)

// Server is a MinIO process.
type Server struct {
	t        testing.TB
	bin, dir string
	region   string
	env      []string
	certsDir string
	host     string
	addr     string
	console  string
	log      *syncBuffer
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
}

// skipOrFail skips when tools are optional, fails under make unit.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("KDEFER_REQUIRE_TOOLS") == "1" {
		t.Fatalf(format+" (KDEFER_REQUIRE_TOOLS=1: build it with test/tools/install.sh minio)", args...)
	}
	t.Skipf(format, args...)
}

// Start runs MinIO and waits until it is ready. It skips the test when
// $KDEFER_MINIO is not an executable, unless KDEFER_REQUIRE_TOOLS=1.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// Options change where StartWith's server listens.
type Options struct {
	// Host is the address the S3 API listens on (a random port), default
	// 127.0.0.1; e.g. the local cluster's node address, which pods reach.
	// The console stays on 127.0.0.1.
	Host string
	// Region is the server's region (MINIO_SITE_REGION), default none:
	// MinIO then takes any. With one, it refuses requests signed for
	// another region, as AWS and Ceph RGW zone groups do.
	Region string
	// Env is more of MinIO's environment (NAME=value), e.g. an OpenID
	// provider for its STS (MINIO_IDENTITY_OPENID_*).
	Env []string
	// CAs are PEM certificates MinIO trusts besides the system's, for the
	// servers it calls itself (an OpenID provider): written to its certs
	// directory's CAs/, where MinIO reads them.
	CAs []byte
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	bin := os.Getenv("KDEFER_MINIO")
	if bin == "" {
		skipOrFail(t, "KDEFER_MINIO is not set")
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		skipOrFail(t, "KDEFER_MINIO=%s is not an executable", bin)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), host: host, addr: freeAddrOn(t, host), console: freeAddr(t), log: &syncBuffer{}, region: opts.Region, env: opts.Env}
	if len(opts.CAs) > 0 {
		s.certsDir = filepath.Join(s.dir, "certs")
		if err := os.MkdirAll(filepath.Join(s.certsDir, "CAs"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.certsDir, "CAs", "ca.crt"), opts.CAs, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			t.Logf("minio log tail:\n%s", s.log.tail(4000))
		}
	})
	s.start(true)
	return s
}

func freeAddr(t testing.TB) string {
	t.Helper()
	return freeAddrOn(t, "127.0.0.1")
}

func freeAddrOn(t testing.TB, host string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs MinIO on s.addr and waits until it serves. A port can be
// taken between freeAddrOn's probe and MinIO's bind (by another test's
// server or an outgoing connection from the same address: seen once in a
// parallel e2e run); MinIO then logs "address already in use" and stays up
// without serving, so start kills it and tries again, on fresh ports when
// fresh (the first start), else on the same port, which a restart must keep.
func (s *Server) start(fresh bool) {
	s.t.Helper()
	const attempts = 5
	for i := 1; ; i++ {
		err := s.waitReady(s.launch())
		if err == nil {
			return
		}
		if !errors.Is(err, errAddrInUse) || i == attempts {
			s.t.Fatalf("%v\n%s", err, s.log.tail(4000))
		}
		s.t.Logf("minio: %v (attempt %d of %d)", err, i, attempts)
		s.Kill()
		if fresh {
			s.addr, s.console = freeAddrOn(s.t, s.host), freeAddr(s.t)
		} else {
			time.Sleep(time.Second) // for whoever holds the port to let go
		}
	}
}

// errAddrInUse is MinIO's answer to a port someone else holds: it exits
// when the port is taken before it starts ("Specified port is already in
// use"), and stays up without serving when it is taken between its check
// and its bind ("bind: address already in use").
var errAddrInUse = errors.New("address already in use")

// launch starts the MinIO process and returns the log offset its output
// starts at and a channel closed when it exits.
func (s *Server) launch() (int64, chan struct{}) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	args := []string{"server", "--quiet", "--address", s.addr, "--console-address", s.console}
	if s.certsDir != "" {
		args = append(args, "--certs-dir", s.certsDir)
	}
	cmd := exec.Command(s.bin, append(args, filepath.Join(s.dir, "data"))...)
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+AccessKey, "MINIO_ROOT_PASSWORD="+SecretKey, "MINIO_BROWSER=off",
		"MINIO_UPDATE=off", "MINIO_CALLHOME_ENABLE=off")
	cmd.Env = append(cmd.Env, s.env...)
	if s.region != "" {
		cmd.Env = append(cmd.Env, "MINIO_SITE_REGION="+s.region)
	}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	// The server must not outlive a test binary that dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	from := s.log.written()
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start minio: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	return from, exited
}

// waitReady waits until the process launch started serves, for 60 s.
func (s *Server) waitReady(from int64, exited chan struct{}) error {
	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		// Not /minio/health/ready: it answers 200 before the object layer
		// is up after a restart, and S3 requests then get 503
		// XMinioServerNotInitialized (seen once in TestServerKilledMidUpload).
		resp, err := client.Get("http://" + s.addr + "/minio/health/cluster")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if strings.Contains(s.log.since(from), "already in use") {
			return fmt.Errorf("minio cannot listen on %s: %w", s.addr, errAddrInUse)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("minio not ready after 60s: %v", err)
		}
		select {
		case <-exited:
			if strings.Contains(s.log.since(from), "already in use") {
				return fmt.Errorf("minio cannot listen on %s: %w", s.addr, errAddrInUse)
			}
			return errors.New("minio exited before it was ready")
		case <-tick.C: // poll the readiness endpoint
		}
	}
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart starts the server again on the same port and data directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start(false)
}

// Addr is host:port.
func (s *Server) Addr() string { return s.addr }

// Endpoint is http://host:port.
func (s *Server) Endpoint() string { return "http://" + s.addr }

// URL is the kdefer-stage URL of bucket/prefix on this server.
func (s *Server) URL(bucket, prefix string) string { return S3URL(s.addr, bucket, prefix) }

// S3URL builds a kdefer-stage s3:// URL for a server at addr.
func S3URL(addr, bucket, prefix string) string {
	return "s3://" + bucket + "/" + prefix + "?endpoint=" + url.QueryEscape("http://"+addr) + "&region=us-east-1&use_path_style=true"
}

// SetCredentials puts the server's credentials into the test's environment.
func SetCredentials(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	// Nothing of the developer's AWS set-up may redirect or re-trust a test.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	for _, k := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_REQUEST_CHECKSUM_CALCULATION"} {
		t.Setenv(k, "")
	}
}

// Client returns a minio-go client for addr.
func Client(t testing.TB, addr string) *minio.Client {
	t.Helper()
	c, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// MakeBucket creates a bucket.
func MakeBucket(t testing.TB, addr, bucket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Client(t, addr).MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("make bucket %s: %v", bucket, err)
	}
}

type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	dropped int64 // bytes reset away from the front
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 1<<20 {
		b.dropped += int64(b.b.Len())
		b.b.Reset()
	}
	return b.b.Write(p)
}

// written is how many bytes were ever written.
func (b *syncBuffer) written() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped + int64(b.b.Len())
}

// since returns what was written after offset from (what is still held).
func (b *syncBuffer) since(from int64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.b.String()
	if i := from - b.dropped; i > 0 && i <= int64(len(s)) {
		s = s[i:]
	}
	return s
}

func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.b.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// OpenIDRoleARN is the role ARN MinIO gives an OpenID provider configured
// in role-policy mode (MINIO_IDENTITY_OPENID_ROLE_POLICY), the RoleArn an
// AssumeRoleWithWebIdentity names: its resource is the base64url SHA-1 of
// the provider's client ID (MinIO's internal/config/identity/openid,
// LookupConfig), and these servers have no region.
func OpenIDRoleARN(clientID string) string {
	h := sha1.Sum([]byte(clientID)) //nolint:gosec // MinIO's derivation, not a security use
	return "arn:minio:iam:::role/" + base64.RawURLEncoding.EncodeToString(h[:])
}

// WaitWebIdentity exchanges token for roleARN at the server's STS
// (AssumeRoleWithWebIdentity) until it succeeds, and fails the test after
// 30 s. MinIO answers S3 requests before its IAM has loaded, and refuses
// every exchange until then ("None of the given policies ... are
// defined"): a test's first exchange must not be that one.
func (s *Server) WaitWebIdentity(roleARN, token string) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		creds, err := credentials.NewSTSWebIdentity(s.Endpoint(), func() (*credentials.WebIdentityToken, error) {
			return &credentials.WebIdentityToken{Token: token}, nil
		}, func(i *credentials.STSWebIdentity) { i.RoleARN = roleARN })
		if err == nil {
			_, err = creds.GetWithContext(nil)
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("AssumeRoleWithWebIdentity at %s for %s: %v\n%s", s.Endpoint(), roleARN, err, s.log.tail(2000))
		}
		time.Sleep(200 * time.Millisecond) // IAM still loading
	}
}
