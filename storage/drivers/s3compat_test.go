package drivers

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/s3server"
)

// The S3 compatibility switches (issue #16): each is proven on the wire or
// against MinIO, through the same storage.Open a stage step uses.

// recorder is a reverse proxy in front of MinIO that records the headers
// of every PUT and, like the S3-compatible servers that need checksum=md5
// or none, refuses aws-chunked trailers when rejectTrailers is set.
type recorder struct {
	mu             sync.Mutex
	puts           []http.Header
	rejectTrailers bool
}

func (rc *recorder) handler(target string) http.Handler {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			rc.mu.Lock()
			rc.puts = append(rc.puts, r.Header.Clone())
			reject := rc.rejectTrailers
			rc.mu.Unlock()
			if reject && r.Header.Get("X-Amz-Trailer") != "" {
				w.WriteHeader(http.StatusNotImplemented)
				_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>aws-chunked trailers are not supported</Message></Error>`)
				return
			}
		}
		rp.ServeHTTP(w, r)
	})
}

func (rc *recorder) take() []http.Header {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	h := rc.puts
	rc.puts = nil
	return h
}

func openURL(t *testing.T, raw string) storage.Backend {
	t.Helper()
	loc, err := storage.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	be, err := storage.Open(context.Background(), loc, storage.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	return be
}

// putAll stores a small object, a streamed one and a multipart one, and
// reads each back.
func putAll(t *testing.T, be storage.Backend) error {
	t.Helper()
	ctx := context.Background()
	small, big, part := bytes.Repeat([]byte("s"), 1000), bytes.Repeat([]byte("b"), smallPutMax+1), bytes.Repeat([]byte("p"), 5<<20)
	if _, err := be.Put(ctx, "small", bytes.NewReader(small), int64(len(small)), storage.PutOptions{}); err != nil {
		return err
	}
	if _, err := be.Put(ctx, "big", bytes.NewReader(big), int64(len(big)), storage.PutOptions{}); err != nil {
		return err
	}
	up, err := be.(storage.Multipart).Begin(ctx, "multi", storage.PutOptions{})
	if err != nil {
		return err
	}
	p, err := up.PutPart(ctx, 1, bytes.NewReader(part), int64(len(part)))
	if err != nil {
		return err
	}
	if err := up.Complete(ctx, []storage.Part{p}, p.CRC); err != nil {
		return err
	}
	for key, want := range map[string][]byte{"small": small, "big": big, "multi": part} {
		r, _, err := be.NewReader(ctx, key, 0, -1)
		if err != nil {
			return err
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s read back %d bytes (%v), want %d", key, len(got), err, len(want))
		}
	}
	return nil
}

func TestChecksumModes(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	rec := &recorder{}
	proxy := httptest.NewServer(rec.handler(srv.Endpoint()))
	defer proxy.Close()
	for _, mode := range []string{"", "crc32c", "md5", "none"} {
		t.Run("checksum="+mode, func(t *testing.T) {
			bucket := "cks-" + mode
			if mode == "" {
				bucket = "cks-default"
			}
			s3server.MakeBucket(t, srv.Addr(), bucket)
			raw := s3server.S3URL(proxy.Listener.Addr().String(), bucket, "")
			if mode != "" {
				raw += "&checksum=" + mode
			}
			// The servers md5 and none are for reject trailers.
			rec.rejectTrailers = mode == "md5" || mode == "none"
			if err := putAll(t, openURL(t, raw)); err != nil {
				t.Fatalf("uploads with checksum=%q: %v", mode, err)
			}
			puts := rec.take()
			if len(puts) != 3 {
				t.Fatalf("%d PUT requests, want 3 (small, big, part)", len(puts))
			}
			for i, h := range puts {
				trailer, md5h := h.Get("X-Amz-Trailer"), h.Get("Content-Md5")
				var amzChecksum []string
				for k := range h {
					if strings.HasPrefix(k, "X-Amz-Checksum") || strings.HasPrefix(k, "X-Amz-Sdk-Checksum") {
						amzChecksum = append(amzChecksum, k)
					}
				}
				switch mode {
				case "", "crc32c":
					// The small PUT sends its CRC32C as a header, the others
					// stream it in a trailer.
					if i == 0 && h.Get("X-Amz-Checksum-Crc32c") == "" || i > 0 && !strings.EqualFold(trailer, "x-amz-checksum-crc32c") {
						t.Errorf("PUT %d: trailer %q, x-amz-checksum-crc32c %q: want the CRC32C", i, trailer, h.Get("X-Amz-Checksum-Crc32c"))
					}
				case "md5":
					if md5h == "" || trailer != "" || len(amzChecksum) > 0 {
						t.Errorf("PUT %d: Content-MD5 %q, trailer %q, %v: want Content-MD5 alone", i, md5h, trailer, amzChecksum)
					}
				case "none":
					if md5h != "" || trailer != "" || len(amzChecksum) > 0 || strings.Contains(h.Get("Content-Encoding"), "aws-chunked") {
						t.Errorf("PUT %d: Content-MD5 %q, trailer %q, %v, encoding %q: want no checksum", i, md5h, trailer, amzChecksum, h.Get("Content-Encoding"))
					}
				}
			}
		})
	}
	// The proxy really is a server that needs the switch.
	rec.rejectTrailers = true
	s3server.MakeBucket(t, srv.Addr(), "cks-rejected")
	if err := putAll(t, openURL(t, s3server.S3URL(proxy.Listener.Addr().String(), "cks-rejected", ""))); err == nil {
		t.Errorf("the default checksum mode got past a server that rejects trailers")
	}
}

// A wrong Content-MD5 is refused: the md5 mode sends the real digest of
// what it sends, which MinIO checks.
func TestContentMD5IsTheBodys(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	rec := &recorder{}
	proxy := httptest.NewServer(rec.handler(srv.Endpoint()))
	defer proxy.Close()
	s3server.MakeBucket(t, srv.Addr(), "md5")
	be := openURL(t, s3server.S3URL(proxy.Listener.Addr().String(), "md5", "")+"&checksum=md5")
	data := bytes.Repeat([]byte("m"), 3<<20)
	if _, err := be.Put(context.Background(), "k", bytes.NewReader(data), int64(len(data)), storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(data)
	if got, want := rec.take()[0].Get("Content-Md5"), base64.StdEncoding.EncodeToString(sum[:]); got != want {
		t.Errorf("Content-MD5 %q, want %q", got, want)
	}
}

// tlsMinIO is MinIO behind a TLS proxy whose certificate no system trusts;
// it returns the proxy's endpoint and a PEM file of its certificate.
func tlsMinIO(t *testing.T, srv *s3server.Server) (endpoint, caFile string) {
	t.Helper()
	proxy := httptest.NewTLSServer((&recorder{}).handler(srv.Endpoint()))
	t.Cleanup(proxy.Close)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	pemData := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw})
	if err := os.WriteFile(caFile, pemData, 0o600); err != nil {
		t.Fatal(err)
	}
	return proxy.URL, caFile
}

func TestCABundle(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "tls")
	endpoint, caFile := tlsMinIO(t, srv)
	base := "s3://tls/p/?region=us-east-1&use_path_style=true&endpoint=" + url.QueryEscape(endpoint)
	put := func(raw string) error { return putOne(t, raw) }
	if err := put(base); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without a CA bundle: %v, want a certificate error", err)
	}
	t.Run("ca_bundle=", func(t *testing.T) {
		if err := put(base + "&ca_bundle=" + url.QueryEscape(caFile)); err != nil {
			t.Error(err)
		}
	})
	t.Run("AWS_CA_BUNDLE", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", caFile)
		if err := put(base); err != nil {
			t.Error(err)
		}
	})
	t.Run("config file", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config")
		if err := os.WriteFile(cfg, []byte("[profile site]\nca_bundle = "+caFile+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_CONFIG_FILE", cfg)
		t.Setenv("AWS_PROFILE", "site")
		if err := put(base); err != nil {
			t.Error(err)
		}
	})
	t.Run("not PEM", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.pem")
		if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := put(base + "&ca_bundle=" + url.QueryEscape(bad)); err == nil || storage.ClassOf(err) != storage.Permanent || !strings.Contains(err.Error(), "PEM") {
			t.Errorf("a CA bundle without certificates: %v, want a permanent error saying so", err)
		}
	})
}

// Without endpoint= the endpoint comes from AWS_ENDPOINT_URL_S3, then
// AWS_ENDPOINT_URL, then the config file's endpoint_url; before, requests
// went to amazonaws.com.
func TestEndpointFromEnvironment(t *testing.T) {
	srv := s3server.Start(t)
	s3server.SetCredentials(t)
	s3server.MakeBucket(t, srv.Addr(), "envep")
	const dead = "http://127.0.0.1:1"
	stat := func(t *testing.T) {
		t.Helper()
		be := openURL(t, "s3://envep/p/?use_path_style=true")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := be.Stat(ctx, "p/none"); !errors.Is(err, storage.ErrNotExist) {
			t.Errorf("stat on the environment's endpoint: %v, want not-exist", err)
		}
	}
	t.Run("AWS_ENDPOINT_URL_S3 first", func(t *testing.T) {
		t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint())
		t.Setenv("AWS_ENDPOINT_URL", dead)
		stat(t)
	})
	t.Run("AWS_ENDPOINT_URL", func(t *testing.T) {
		t.Setenv("AWS_ENDPOINT_URL", srv.Endpoint())
		stat(t)
	})
	t.Run("config file profile", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config")
		if err := os.WriteFile(cfg, []byte("[default]\nendpoint_url = "+dead+"\n[profile site]\nendpoint_url = "+srv.Endpoint()+"\nregion = us-east-1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_CONFIG_FILE", cfg)
		t.Setenv("AWS_PROFILE", "site")
		stat(t)
	})
}

// use_path_style=false forces virtual-host style even where the client
// would pick path style (any endpoint but AWS's and Google's).
func TestAddressingStyle(t *testing.T) {
	s3server.SetCredentials(t)
	for _, tc := range []struct{ param, wantHost, wantPath string }{
		{"", "s3.example.test:9000", "/bkt/k"},
		{"&use_path_style=true", "s3.example.test:9000", "/bkt/k"},
		{"&use_path_style=false", "bkt.s3.example.test:9000", "/k"},
	} {
		be := openURL(t, "s3://bkt/?region=us-east-1&endpoint=http://s3.example.test:9000"+tc.param)
		// A presigned URL is the request's URL, made without a request.
		u, err := be.(*s3Backend).core.PresignedGetObject(context.Background(), "bkt", "k", time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		if u.Host != tc.wantHost || u.Path != tc.wantPath {
			t.Errorf("%q: request to %s%s, want %s%s", tc.param, u.Host, u.Path, tc.wantHost, tc.wantPath)
		}
	}
}

// A web identity token (IRSA and the like) is exchanged at
// AWS_ENDPOINT_URL_STS and the S3 request is signed with what STS returns.
func TestWebIdentity(t *testing.T) {
	s3server.SetCredentials(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	var form url.Values
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		form = r.PostForm
		_, _ = io.WriteString(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentityResult><Credentials>`+
			`<AccessKeyId>WEBIDKEY</AccessKeyId><SecretAccessKey>websecret</SecretAccessKey><SessionToken>webtoken</SessionToken>`+
			`<Expiration>2099-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>`)
	}))
	defer sts.Close()
	var auth, token string
	s3 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth, token = r.Header.Get("Authorization"), r.Header.Get("X-Amz-Security-Token")
		w.WriteHeader(http.StatusNotFound)
	}))
	defer s3.Close()
	webIdentityEnv(t, sts.URL)
	be := openURL(t, s3server.S3URL(s3.Listener.Addr().String(), "bkt", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = be.Stat(ctx, "k")
	if form.Get("WebIdentityToken") != "the-jwt" || form.Get("RoleArn") != "arn:aws:iam::123456789012:role/kdefer" {
		t.Errorf("STS got %v, want the token file's token and AWS_ROLE_ARN", form)
	}
	if !strings.Contains(auth, "Credential=WEBIDKEY/") || token != "webtoken" {
		t.Errorf("S3 request signed with %q, token %q: want STS's credentials", auth, token)
	}
}

// webIdentityEnv gives the S3 driver a web identity: the token "the-jwt"
// in a file, exchanged at stsURL for the role kdefer.
func webIdentityEnv(t *testing.T, stsURL string) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("the-jwt"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
	t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/kdefer")
	t.Setenv("AWS_ENDPOINT_URL_STS", stsURL)
}

// A token STS refuses fails the request with STS's reason, the role and
// the STS named, permanently: not as the bucket's AccessDenied of an
// anonymous request, which minio-go's credential chain falls back to.
func TestWebIdentityRefused(t *testing.T) {
	s3server.SetCredentials(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type></Type><Code>InvalidIdentityToken</Code>`+
			`<Message>Incorrect token audience</Message></Error><RequestId>1</RequestId></ErrorResponse>`)
	}))
	defer sts.Close()
	anonymous := 0
	s3 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			anonymous++
		}
		w.WriteHeader(http.StatusForbidden)
	}))
	defer s3.Close()
	webIdentityEnv(t, sts.URL)
	be := openURL(t, s3server.S3URL(s3.Listener.Addr().String(), "bkt", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := be.Stat(ctx, "k")
	if err == nil {
		t.Fatal("Stat succeeded with a refused token")
	}
	for _, want := range []string{"web identity", "Incorrect token audience", "InvalidIdentityToken", "arn:aws:iam::123456789012:role/kdefer", sts.URL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if class, fix := storage.Classify(err); class != storage.Permanent || !strings.Contains(fix, "spec.webIdentity") {
		t.Errorf("classified %v, fix %q: want permanent, pointing at spec.webIdentity", class, fix)
	}
	if anonymous > 0 {
		t.Errorf("%d anonymous requests reached the bucket", anonymous)
	}
}

// The documented order (docs/stage.md, "S3 settings"): URL parameter, AWS
// environment, config file profile, default.
func TestS3SettingsOrder(t *testing.T) {
	s3server.SetCredentials(t)
	cfg := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(cfg, []byte("[default]\nregion = from-file\nendpoint_url = http://file:1\nca_bundle = /file.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", cfg)
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	resolve := func(q string) s3Config {
		t.Helper()
		v, _ := url.ParseQuery(q)
		c, err := resolveS3Config(v)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := resolve(""); c.region != "from-file" || c.host != "file:1" || c.caBundle != "/file.pem" || c.checksum != "crc32c" {
		t.Errorf("config file only: %+v", c)
	}
	t.Setenv("AWS_DEFAULT_REGION", "default-env")
	t.Setenv("AWS_ENDPOINT_URL", "http://env:2")
	t.Setenv("AWS_CA_BUNDLE", "/env.pem")
	t.Setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "WHEN_REQUIRED")
	if c := resolve(""); c.region != "default-env" || c.host != "env:2" || c.caBundle != "/env.pem" || c.checksum != "none" {
		t.Errorf("environment over the file: %+v", c)
	}
	t.Setenv("AWS_REGION", "env")
	t.Setenv("AWS_ENDPOINT_URL_S3", "https://env-s3:3")
	if c := resolve(""); c.region != "env" || c.host != "env-s3:3" || !c.secure {
		t.Errorf("AWS_REGION and AWS_ENDPOINT_URL_S3 first: %+v", c)
	}
	if c := resolve("region=url&endpoint=http://url:4&ca_bundle=/url.pem&checksum=md5"); c.region != "url" || c.host != "url:4" || c.secure || c.caBundle != "/url.pem" || c.checksum != "md5" {
		t.Errorf("URL parameters over everything: %+v", c)
	}
	t.Setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
	if c := resolve(""); c.host != "s3.amazonaws.com" {
		t.Errorf("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS: endpoint %s, want AWS", c.host)
	}
}

// A token file that is not there (its projected volume not mounted, the
// variable naming another path) is no passing failure: it fails at once,
// naming the file and the fix, not after the retry budget.
func TestWebIdentityTokenFileMissing(t *testing.T) {
	s3server.SetCredentials(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	stsCalls := 0
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		stsCalls++
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer sts.Close()
	s3 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	defer s3.Close()
	webIdentityEnv(t, sts.URL)
	missing := filepath.Join(t.TempDir(), "not-mounted", "token")
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", missing)
	be := openURL(t, s3server.S3URL(s3.Listener.Addr().String(), "bkt", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := be.Stat(ctx, "k")
	if err == nil {
		t.Fatal("Stat succeeded without a token")
	}
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q does not name the token file %s", err, missing)
	}
	if class, fix := storage.Classify(err); class != storage.Permanent || !strings.Contains(fix, "AWS_WEB_IDENTITY_TOKEN_FILE") {
		t.Errorf("classified %v, fix %q: want permanent, pointing at AWS_WEB_IDENTITY_TOKEN_FILE", class, fix)
	}
	if stsCalls > 0 {
		t.Errorf("%d requests reached STS without a token", stsCalls)
	}
}
