// Command criready exits 0 once a containerd's CRI answers the call the
// kubelet makes first (RuntimeService/Version), and non-zero with the error
// otherwise. cluster.sh waits on it before it starts a node's kubelet.
//
// Why not `ctr version`: containerd's own gRPC API answers as soon as the
// daemon listens, while its CRI plugin is still recovering the containers of
// the run before ("server is not initialized yet"). A kubelet started in that
// window checks the CRI once and exits (e2e run w26, TestMultiNodeNodeLost/Back).
//
// The request is sent as raw protobuf bytes (an empty VersionRequest) so the
// project needs no CRI API module for one call; the reply is not decoded.
//
//	criready /path/to/containerd.sock
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// versionMethod is the kubelet's first CRI call (k8s.io/cri-api, runtime v1).
const versionMethod = "/runtime.v1.RuntimeService/Version"

// rawCodec passes bytes through; its name makes the content type
// application/grpc+proto, which is what the server decodes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: criready SOCKET")
		os.Exit(2)
	}
	if err := check(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "criready: %v\n", err)
		os.Exit(1)
	}
}

func check(socket string) error {
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", socket, err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, reply := []byte{}, []byte{}
	if err := conn.Invoke(ctx, versionMethod, &req, &reply, grpc.ForceCodec(rawCodec{})); err != nil {
		return fmt.Errorf("call CRI Version on %s: %w", socket, err)
	}
	return nil
}
