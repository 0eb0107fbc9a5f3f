#!/usr/bin/env bash
# make e2e: kdefer's trigger matrix on the local single-node cluster.
#   1. starts the cluster (test/cluster/cluster.sh up), stopped again on exit
#      unless KDEFER_KEEP_CLUSTER=1;
#   2. builds the cluster's own images (pause, busybox) and imports them
#      (KDEFER_BUILD_IMAGES=0 imports bin/images as they are);
#   3. starts the test registry (test/registry) on 10.88.0.1:5000, builds
#      kdefer's images from this tree and pushes them there (make images);
#   4. starts MinIO on the node address 10.88.0.1:9000 (pods reach it there);
#   5. deploys kdefer by helm install of deploy/helm/kdefer with
#      deploy/helm/local-values.yaml (test/helminstall), its images pulled from
#      the registry: the chart, the registry path and the images are what the
#      scenarios run on (test/helmchart checks that the chart installs the
#      objects of deploy/overlays/local, which make demo applies;
#      KDEFER_E2E_INSTALL=kustomize applies that overlay instead);
#   6. go test -tags e2e ./test/e2e/ (one package: -v output streams; extra go test flags: KDEFER_E2E_FLAGS,
#      e.g. KDEFER_E2E_FLAGS='-run TestSucceeded -v');
#   on failure, dumps the component logs and kdefer's.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export LOG_TAG=e2e
# shellcheck source=test/e2e/lib.sh
source "$ROOT/test/e2e/lib.sh"

CLUSTER=$ROOT/test/cluster/cluster.sh
export KDEFER_CLUSTER_DIR=${KDEFER_CLUSTER_DIR:-$ROOT/bin/cluster}
STATE=$ROOT/bin/e2e
mkdir -p "$STATE"
start=$SECONDS
rc=1

finish() {
	rc=$?
	set +e
	if ((rc != 0)); then
		log "FAILED (exit $rc): component logs follow"
		"$CLUSTER" logs 60 2>&1 | tail -n 400
		log "kdefer-controller log:"
		kubectl -n kdefer-system logs deploy/kdefer-controller --tail=100 2>&1
		log "MinIO log:"
		tail -n 20 "$STATE/minio.log" 2>/dev/null
		log "registry log:"
		tail -n 20 "$STATE/registry.log" 2>/dev/null
	fi
	stop_minio "$STATE"
	stop_registry "$STATE"
	if [[ ${KDEFER_KEEP_CLUSTER:-0} == 1 ]]; then
		log "KDEFER_KEEP_CLUSTER=1: the cluster keeps running (test/cluster/cluster.sh down stops it)"
	else
		"$CLUSTER" down >&2 || rc=1
	fi
	log "e2e done in $((SECONDS - start))s, exit $rc"
	exit "$rc"
}
# Before the trap: a run still waiting for the lock must not stop the other
# run's cluster when it is interrupted.
lock_cluster
trap finish EXIT

"$CLUSTER" up >&2
eval "$("$CLUSTER" env)"
export KUBECONFIG
# KDEFER_E2E_INSTALL=kustomize: kdefer's images imported as tarballs and
# deploy/overlays/local applied, as make demo does (no registry, no helm).
install=${KDEFER_E2E_INSTALL:-helm}
if [[ $install == kustomize ]]; then
	build_images
else
	build_images pause,busybox
	t0=$SECONDS
	start_registry "$STATE"
	push_images "$STATE"
	log "registry started and kdefer's images pushed in $((SECONDS - t0))s"
fi
rm -rf "$STATE/data" # every run starts with an empty bucket
start_minio "$STATE"
# The MinIO binary for tests that run their own server (test/s3server).
KDEFER_MINIO=$(minio_bin)
export KDEFER_MINIO
export KDEFER_E2E_S3=$E2E_MINIO_ADDR
t0=$SECONDS
if [[ $install == kustomize ]]; then deploy_kdefer; else deploy_kdefer_helm "$STATE"; fi
log "kdefer installed ($install) and ready in $((SECONDS - t0))s"
log "kdefer ready after $((SECONDS - start))s"
# make test starts this set-up while the unit tier runs and lets the
# scenarios begin once it is over (KDEFER_E2E_AFTER names a file the unit
# tier's end writes "go" into), so their time bounds never run on a machine
# busy with unit tests; anything else in it stops the tier here.
if [[ -n ${KDEFER_E2E_AFTER:-} ]]; then
	log "waiting for $KDEFER_E2E_AFTER before the scenarios"
	while [[ ! -s $KDEFER_E2E_AFTER ]]; do sleep 1; done
	[[ $(<"$KDEFER_E2E_AFTER") == go ]] || die "not running the scenarios: $KDEFER_E2E_AFTER says $(<"$KDEFER_E2E_AFTER")"
fi
log "running the e2e tests"
# -parallel: the scenarios mostly wait on the kubelet and kdefer, not the CPU.
# KDEFER_E2E_RUNS=N (make e2e-soak N=…) runs the whole tier N times on this one
# cluster and prints a table of scenario × run; any failed run fails the tier.
# Nothing is retried: a scenario that fails once in N is a bug to find.
runs=${KDEFER_E2E_RUNS:-1}
failed=0
for ((i = 1; i <= runs; i++)); do
	((runs == 1)) || log "e2e run $i of $runs"
	# shellcheck disable=SC2086
	if ! KDEFER_REQUIRE_TOOLS=1 go test -tags e2e -count=1 -timeout 30m -parallel 8 -v ${KDEFER_E2E_FLAGS:-} ./test/e2e/ 2>&1 |
		tee "$STATE/run-$i.log"; then
		failed=$((failed + 1))
	fi
done
((runs == 1)) || "$ROOT/test/e2e/soak-table.sh" "$STATE"/run-*.log
((failed == 0)) || { log "$failed of $runs e2e runs failed"; exit 1; }
