package drivers

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kdefer/kdefer/storage"
	"github.com/kdefer/kdefer/test/s3server"
)

// oidcIssuer is an OpenID provider in the test process: its discovery
// document and key set, and the tokens it signs (RS256), as a Kubernetes
// apiserver's service-account issuer serves and signs them.
type oidcIssuer struct {
	srv *httptest.Server
	key *rsa.PrivateKey
}

func newOIDCIssuer(t *testing.T) *oidcIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &oidcIssuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/openid/v1/jwks",
			"response_types_supported": []string{"id_token"}, "subject_types_supported": []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("/openid/v1/jwks", func(w http.ResponseWriter, _ *http.Request) {
		b64 := base64.RawURLEncoding.EncodeToString
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{"kty": "RSA", "alg": "RS256", "use": "sig", "kid": "k1",
			"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}})
	})
	// Started only once is.srv is set: the handlers read it.
	is.srv = httptest.NewUnstartedServer(mux)
	is.srv.Start()
	t.Cleanup(is.srv.Close)
	return is
}

// token is a service-account token of sub for audience, valid an hour.
func (is *oidcIssuer) token(t *testing.T, sub, audience string) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	now := time.Now()
	signed := enc(map[string]string{"alg": "RS256", "kid": "k1", "typ": "JWT"}) + "." +
		enc(map[string]any{"iss": is.srv.URL, "sub": sub, "aud": []string{audience}, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	h := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, is.key, crypto.SHA256, h[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// A web identity token is exchanged at a real STS: MinIO's
// AssumeRoleWithWebIdentity, with an OpenID provider in role-policy mode
// (the mode the e2e tier's TestWebIdentity gives the cluster's own issuer).
// With no other credentials the backend writes and reads with what STS
// returned; a token of another audience fails with MinIO's reason,
// permanently, and nothing is written.
func TestWebIdentityMinIO(t *testing.T) {
	const audience = "kdefer-sts"
	is := newOIDCIssuer(t)
	srv := s3server.StartWith(t, s3server.Options{Env: []string{
		"MINIO_IDENTITY_OPENID_CONFIG_URL=" + is.srv.URL + "/.well-known/openid-configuration",
		"MINIO_IDENTITY_OPENID_CLIENT_ID=" + audience,
		"MINIO_IDENTITY_OPENID_ROLE_POLICY=readwrite",
	}})
	s3server.MakeBucket(t, srv.Addr(), "bkt")
	srv.WaitWebIdentity(s3server.OpenIDRoleARN(audience), is.token(t, "system:serviceaccount:ns:probe", audience))
	s3server.SetCredentials(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("MINIO_ACCESS_KEY", "")
	t.Setenv("MINIO_SECRET_KEY", "")
	t.Setenv("AWS_ROLE_ARN", s3server.OpenIDRoleARN(audience))
	t.Setenv("AWS_ENDPOINT_URL_STS", srv.Endpoint())
	tokenFile := filepath.Join(t.TempDir(), "token")
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct{ audience, wantErr string }{{audience, ""}, {"another", "must match configured OpenID Client ID"}} {
		if err := os.WriteFile(tokenFile, []byte(is.token(t, "system:serviceaccount:ns:stager", tc.audience)), 0o600); err != nil {
			t.Fatal(err)
		}
		be := openURL(t, srv.URL("bkt", tc.audience+"/"))
		data := []byte("an output")
		_, err := be.Put(ctx, "out.txt", bytes.NewReader(data), int64(len(data)), storage.PutOptions{})
		if tc.wantErr == "" {
			if err != nil {
				t.Fatalf("put with a token for %s: %v", tc.audience, err)
			}
			if info, err := be.Stat(ctx, "out.txt"); err != nil || info.Size != int64(len(data)) {
				t.Errorf("stat: %+v, %v", info, err)
			}
			continue
		}
		t.Logf("a token for %s: %v", tc.audience, err)
		if err == nil || !strings.Contains(err.Error(), "web identity") || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("put with a token for %s: %v, want the refused web identity and %q", tc.audience, err, tc.wantErr)
		}
		if class, _ := storage.Classify(err); class != storage.Permanent {
			t.Errorf("classified %v, want permanent", class)
		}
	}
	objs := 0
	for o := range s3server.Client(t, srv.Addr()).ListObjects(ctx, "bkt", minio.ListObjectsOptions{Recursive: true}) {
		if o.Err == nil {
			objs++
		}
	}
	if objs != 1 {
		t.Errorf("%d objects in the bucket, want the one written with the right audience", objs)
	}
}
