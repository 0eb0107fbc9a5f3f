package s3server

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"
)

var versity struct {
	once sync.Once
	dir  string
	addr string
	err  error
}

// RunTests runs m and then removes the directory of the gateway
// StartVersity started, if it did: the gateway outlives every test of the
// process, so no test's cleanup can remove it, and each package's run left
// one behind in $TMPDIR (up to 141 MB each). Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(s3server.RunTests(m)) }
func RunTests(m *testing.M) int {
	code := m.Run()
	if versity.dir != "" {
		if err := os.RemoveAll(versity.dir); err != nil {
			fmt.Fprintf(os.Stderr, "remove versitygw directory: %v\n", err)
		}
	}
	return code
}

// StartVersity returns the address of versitygw's embedded S3 gateway,
// running in this test process on a posix backend in a temporary directory.
// embedgw supports one instance per process, so every caller shares it; use
// a bucket per test. Note: versitygw's posix backend changes the process's
// working directory to its root, so tests using it must use absolute paths.
func StartVersity(t testing.TB) string {
	t.Helper()
	versity.once.Do(func() {
		dir, err := os.MkdirTemp("", "kdefer-versitygw-*")
		if err != nil {
			versity.err = err
			return
		}
		versity.dir = dir
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			versity.err = err
			return
		}
		addr := l.Addr().String()
		l.Close()
		errc := make(chan error, 1)
		go func() { errc <- RunVersityGW(context.Background(), dir, addr, AccessKey, SecretKey) }()
		deadline := time.Now().Add(20 * time.Second)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				versity.addr = addr
				return
			}
			if time.Now().After(deadline) {
				versity.err = err
				return
			}
			select {
			case err := <-errc:
				versity.err = err
				return
			case <-tick.C: // poll until the gateway listens
			}
		}
	})
	if versity.err != nil {
		t.Fatalf("start versitygw: %v", versity.err)
	}
	return versity.addr
}

// RunVersityGW serves versitygw's S3 gateway on addr, on a posix backend
// in dir, with one root user, until ctx ends or it fails. The limits must be
// set (zero is refused); 512 is far above any client's concurrency here.
// embedgw allows one gateway per process.
func RunVersityGW(ctx context.Context, dir, addr, accessKey, secretKey string) error {
	be, err := posix.New(dir, meta.XattrMeta{}, posix.PosixOpts{})
	if err != nil {
		return err
	}
	return embedgw.RunVersityGW(ctx, be, &embedgw.Config{
		RootUserAccess: accessKey, RootUserSecret: secretKey, Region: "us-east-1",
		Ports: []string{addr}, MaxConnections: 512, MaxRequests: 512, MultipartMaxParts: 10000,
		Quiet: true, KeepAlive: true,
	})
}
