// Command registry is the OCI registry of kdefer's tests: go-containerregistry's
// pkg/registry (the registry its own tests use), in one process, plain HTTP.
// The e2e harness (test/e2e/lib.sh start_registry) runs it on the node
// address, `make images REGISTRY=…` pushes to it, and the local cluster's
// containerd pulls from it (test/cluster/cluster.sh: hosts.toml).
//
//	go run ./test/registry --addr 10.88.0.1:5000 [--blobs DIR]
//
// Manifests live in memory; blobs too unless --blobs names a directory.
// Everything is gone when it exits: a test registry, not a store.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5000", "address to listen on (plain HTTP)")
	blobs := flag.String("blobs", "", "directory for blobs (default: memory)")
	quiet := flag.Bool("quiet", false, "do not log every request")
	flag.Parse()
	if err := run(*addr, *blobs, *quiet); err != nil {
		fmt.Fprintf(os.Stderr, "registry: %v\n", err)
		os.Exit(1)
	}
}

func run(addr, blobs string, quiet bool) error {
	h, err := handler(blobs, quiet)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("serving an OCI registry on http://%s", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// handler is the registry: blobs in memory, or in the directory blobs.
func handler(blobs string, quiet bool) (http.Handler, error) {
	// The referrers API (OCI 1.1): a release's SBOMs refer to its images.
	opts := []registry.Option{registry.WithReferrersSupport(true)}
	if quiet {
		opts = append(opts, registry.Logger(log.New(io.Discard, "", 0)))
	}
	if blobs != "" {
		if err := os.MkdirAll(blobs, 0o755); err != nil {
			return nil, err
		}
		opts = append(opts, registry.WithBlobHandler(registry.NewDiskBlobHandler(blobs)))
	}
	return registry.New(opts...), nil
}
