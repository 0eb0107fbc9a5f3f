package stageout

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// LogClient is the LogSource of a stage-out step in a defer pod: the logs
// endpoint (stagecontract.LogsPath: kdefer's node agent on the same node,
// or kdefer-controller), which it asks with its projected service-account
// token.
type LogClient struct {
	// URL of the endpoint.
	URL string
	// TokenPath is read before each request: the kubelet rotates the token.
	TokenPath string
	// Client trusts the endpoint's CA.
	Client *http.Client
	// Steps asks for the bearer's own defer pod's defer containers' logs
	// (stagecontract.LogsStepsParam) instead of the ended pod's.
	Steps bool
}

// NewLogClient returns a client of the endpoint at rawURL whose certificate
// caPEM signs, for serverName ("": the URL's host).
func NewLogClient(rawURL, caPEM, serverName, tokenPath string) (*LogClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%s: want an https:// URL, got %q", stagecontract.EnvLogsURL, rawURL)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		return nil, fmt.Errorf("%s: no PEM certificate", stagecontract.EnvLogsCA)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
		ResponseHeaderTimeout: 30 * time.Second, Proxy: nil}
	return &LogClient{URL: rawURL, TokenPath: tokenPath, Client: &http.Client{Transport: tr}}, nil
}

// LogClientFromEnv returns the client the stagecontract.EnvLogsURL,
// EnvLogsCA and EnvLogsMaxBytes environment describe, or a zero Logs when
// the URL is unset (logs off); steps asks for the defer pod's own steps'
// logs (LogClient.Steps).
func LogClientFromEnv(env func(string) (string, bool), steps bool) (Logs, error) {
	u, _ := env(stagecontract.EnvLogsURL)
	if u == "" {
		return Logs{}, nil
	}
	ca, _ := env(stagecontract.EnvLogsCA)
	name, _ := env(stagecontract.EnvLogsServerName)
	c, err := NewLogClient(u, ca, name, stagecontract.LogsTokenPath)
	if err != nil {
		return Logs{}, err
	}
	c.Steps = steps
	l := Logs{Source: c}
	if s, _ := env(stagecontract.EnvLogsMaxBytes); s != "" {
		if l.MaxBytes, err = strconv.ParseInt(s, 10, 64); err != nil || l.MaxBytes <= 0 {
			return Logs{}, fmt.Errorf("%s: want a positive number of bytes, got %q", stagecontract.EnvLogsMaxBytes, s)
		}
	}
	return l, nil
}

// Index implements LogSource.
func (c *LogClient) Index(ctx context.Context) (stagecontract.LogsIndex, error) {
	var idx stagecontract.LogsIndex
	u := c.URL
	if c.Steps {
		u += c.sep() + url.Values{stagecontract.LogsStepsParam: {"true"}}.Encode()
	}
	rc, err := c.get(ctx, u)
	if err != nil {
		return idx, err
	}
	defer rc.Close()
	if err := json.NewDecoder(io.LimitReader(rc, 1<<20)).Decode(&idx); err != nil {
		return idx, fmt.Errorf("decode the logs index: %w", err)
	}
	return idx, nil
}

// Open implements LogSource.
func (c *LogClient) Open(ctx context.Context, ref stagecontract.LogRef) (io.ReadCloser, error) {
	q := url.Values{"container": {ref.Container}}
	if ref.Previous {
		q.Set("previous", "true")
	}
	if c.Steps {
		q.Set(stagecontract.LogsStepsParam, "true")
	}
	return c.get(ctx, c.URL+c.sep()+q.Encode())
}

// sep joins a query to the endpoint's URL.
func (c *LogClient) sep() string {
	if strings.Contains(c.URL, "?") {
		return "&"
	}
	return "?"
}

func (c *LogClient) get(ctx context.Context, u string) (io.ReadCloser, error) {
	token, err := os.ReadFile(c.TokenPath)
	if err != nil {
		return nil, fmt.Errorf("read the logs token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("logs request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := c.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		// The reason goes to the manifest's logWarnings: the endpoint's
		// answer, not the URL the warning's pod and container already say.
		err := fmt.Errorf("logs endpoint: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return nil, err // transient: asked again (archiveLogs)
		}
		// A refused token, a log the kubelet no longer has: asking again
		// gets the same answer.
		return nil, &storage.Error{Class: storage.Permanent, Err: err}
	}
	return resp.Body, nil
}
