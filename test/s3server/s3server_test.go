package s3server

import (
	"net"
	"testing"
)

// A port taken between freeAddrOn's probe and MinIO's bind makes MinIO stay
// up without serving: the first start moves to fresh ports and serves.
func TestStartOnTakenPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	s := Start(t)
	taken := held.Addr().String()
	s.Kill()
	s.addr = taken
	s.start(true)
	if s.Addr() == taken {
		t.Fatalf("serving on %s, the port another process holds", taken)
	}
	MakeBucket(t, s.Addr(), "moved")
}
