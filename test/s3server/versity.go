package s3server

import (
	"context"
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
	addr string
	err  error
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
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			versity.err = err
			return
		}
		addr := l.Addr().String()
		l.Close()
		be, err := posix.New(dir, meta.XattrMeta{}, posix.PosixOpts{})
		if err != nil {
			versity.err = err
			return
		}
		errc := make(chan error, 1)
		go func() {
			errc <- embedgw.RunVersityGW(context.Background(), be, &embedgw.Config{
				RootUserAccess: AccessKey, RootUserSecret: SecretKey, Region: "us-east-1",
				Ports: []string{addr}, MaxConnections: 512, MaxRequests: 512, MultipartMaxParts: 10000,
				Quiet: true, KeepAlive: true,
			})
		}()
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
