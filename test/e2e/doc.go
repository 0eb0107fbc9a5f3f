// Package e2e is kdefer's end-to-end tier: the trigger matrix on the local
// single-node cluster (test/cluster) with real containers and a real MinIO.
// Its tests carry the e2e build tag; test/e2e/run.sh (make e2e) starts the
// cluster and MinIO, deploys kdefer and runs them:
//
//	go test -tags e2e -count=1 ./test/e2e/...
package e2e
