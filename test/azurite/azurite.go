// Package azurite starts Azurite, Microsoft's Azure Storage emulator (its
// blob service), for azblob:// tests: a Node.js child process from
// $KDEFER_AZURITE (test/tools/install.sh azurite), on 127.0.0.1 with a
// random port and a fresh data directory, killed when the test ends.
//
// Like s3server it must not import kdefer's packages, so any layer's tests
// may use it.
package azurite

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// Azurite's well-known development account (its documentation publishes
// it; it opens nothing but a local emulator).
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Server is an Azurite blob service process.
type Server struct {
	// Addr is host:port of the blob service.
	Addr string
	// Dir is its data directory (--location): blob content is kept in
	// extent files under it, which a test may damage as a disk would.
	Dir string
}

// Start runs Azurite's blob service and waits until it accepts connections,
// and puts its account into the test's environment (AZURE_STORAGE_ACCOUNT
// and AZURE_STORAGE_KEY, where gocloud's azureblob reads a shared key). It
// skips the test when $KDEFER_AZURITE is not an executable, unless
// KDEFER_REQUIRE_TOOLS=1.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv("KDEFER_AZURITE")
	if fi, err := os.Stat(bin); bin == "" || err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		msg := "KDEFER_AZURITE=" + strconv.Quote(bin) + " is not an executable"
		if os.Getenv("KDEFER_REQUIRE_TOOLS") == "1" {
			t.Fatal(msg + " (KDEFER_REQUIRE_TOOLS=1: install it with test/tools/install.sh azurite)")
		}
		t.Skip(msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	var log syncBuffer
	// --skipApiVersionCheck: the Go SDK may speak a newer service version
	// than this Azurite release knows; the requests kdefer makes are old.
	// --loose: Azurite refuses headers it does not implement that Azure
	// accepts. --disableTelemetry: nothing leaves the machine.
	dir := t.TempDir()
	cmd := exec.Command(bin, "--blobHost", "127.0.0.1", "--blobPort", port, "--location", dir,
		"--skipApiVersionCheck", "--loose", "--disableTelemetry")
	cmd.Stdout, cmd.Stderr = &log, &log
	// The server must not outlive a test binary that dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start azurite: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("azurite log:\n%s", log.String())
		}
	})
	// Node.js and Azurite's start take a few seconds on a loaded machine.
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("azurite exited: %s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("azurite not listening after 60s: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Setenv("AZURE_STORAGE_ACCOUNT", Account)
	t.Setenv("AZURE_STORAGE_KEY", Key)
	return &Server{Addr: addr, Dir: dir}
}

// URL is an azblob:// URL of container and prefix on s: the emulator's
// address is in the URL's parameters, the credentials in the environment.
func (s *Server) URL(container, prefix string) string {
	return "azblob://" + container + "/" + prefix + "?" + url.Values{
		"domain": {s.Addr}, "protocol": {"http"}, "localemu": {"true"}, "storage_account": {Account},
	}.Encode()
}

// MakeContainer creates a container.
func (s *Server) MakeContainer(t testing.TB, name string) {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(Account, Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := azblob.NewClientWithSharedKeyCredential("http://"+s.Addr+"/"+Account, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.CreateContainer(ctx, name, nil); err != nil {
		t.Fatalf("create container %s: %v", name, err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 1<<20 {
		return len(p), nil // enough to see why it failed
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
