#!/usr/bin/env bash
# make demo: kdefer's main job on this machine. Starts the local cluster and
# MinIO (on the node address 10.88.0.1:9000), deploys kdefer, generates an
# input dataset in s3://inputs/physics/run-2026/, submits examples/physics
# (stage-in -> compute writing outputs), evicts the pod mid-run as a node
# drain would, and shows the DeferRun, the uploaded objects and the manifest.
# Everything keeps running for a look around; `make demo-down`
# (test/demo/run.sh down) removes it all.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export LOG_TAG=demo
# shellcheck source=test/e2e/lib.sh
source "$ROOT/test/e2e/lib.sh"
STATE=$ROOT/bin/demo
NS=physics

down() {
	if "$CLUSTER" status >/dev/null 2>&1; then
		eval "$("$CLUSTER" env)"
		kubectl delete namespace "$NS" --ignore-not-found --timeout=120s >/dev/null || true
	fi
	stop_minio "$STATE"
	"$CLUSTER" down
	rm -rf "$STATE"
	log "demo removed"
}

if [[ ${1:-} == down ]]; then
	down
	exit 0
fi
[[ $# -eq 0 ]] || die "usage: test/demo/run.sh [down]"

start=$SECONDS
mkdir -p "$STATE"
lock_cluster
# Built before the cluster starts, which imports them (an image built after
# would not reach the node: the demo ran whatever bin/images held before).
build_images
"$CLUSTER" up >&2
eval "$("$CLUSTER" env)"
export KUBECONFIG
go build -o "$STATE/s3" ./test/demo/s3
go build -o "$STATE/kdefer" ./cmd/kdefer
s3() { "$STATE/s3" -endpoint "$E2E_MINIO_ADDR" "$@"; }

start_minio "$STATE"
s3 mb inputs results
s3 gen inputs/physics/run-2026 8 262144
log "input dataset: s3://inputs/physics/run-2026/ (8 event files, 2 MiB)"

deploy_kdefer
# A previous demo's Job is replaced.
kubectl delete namespace "$NS" --ignore-not-found --timeout=120s >/dev/null
log "submitting examples/physics"
kubectl apply -f examples/physics/

pod_name() { kubectl -n "$NS" get pods -l batch.kubernetes.io/job-name=sim -o jsonpath='{.items[0].metadata.name}'; }
midrun() { kubectl -n "$NS" logs job/sim -c compute 2>/dev/null | grep -q 'checkpoint step 5'; }
wait_until 180 "the simulation to reach its 5th checkpoint" midrun || {
	kubectl -n "$NS" get pods,events >&2
	exit 1
}
POD=$(pod_name)
log "pod $POD is mid-run:"
kubectl -n "$NS" logs "$POD" -c compute | sed 's/^/    /'

log "evicting $POD (the Eviction API, as kubectl drain does)"
kubectl create --raw "/api/v1/namespaces/$NS/pods/$POD/eviction" -f - >/dev/null <<JSON
{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"$POD","namespace":"$NS"}}
JSON

run_done() {
	local st
	st=$(kubectl -n "$NS" get deferrun "$POD" -o jsonpath='{.status.state}')
	[[ $st == Succeeded || $st == Failed || $st == Skipped ]]
}
wait_until 180 "the defer run of $POD to finish" run_done || {
	kubectl -n "$NS" get deferrun "$POD" -o yaml >&2
	exit 1
}
STATE_NOW=$(kubectl -n "$NS" get deferrun "$POD" -o jsonpath='{.status.state}')

echo
echo "\$ kubectl get deferruns -n $NS"
kubectl get deferruns -n "$NS"
echo
echo "\$ kubectl get jobs,pods,pvc -n $NS"
kubectl get jobs,pods,pvc -n "$NS"
echo
echo "# objects in s3://results/$NS/sim/$POD/"
s3 ls "results/$NS/sim/$POD/"
echo
echo "# s3://results/$NS/sim/$POD/_kdefer/manifest.json"
s3 cat "results/$NS/sim/$POD/_kdefer/manifest.json"
echo
echo "# the simulation's log, as uploaded"
s3 cat "results/$NS/sim/$POD/out/logs/sim.log" | tail -n 4
echo
# The evicted pod's containers were removed with their logs as they
# stopped; kdefer's node agent kept them, and they are in the bucket.
echo "\$ kdefer logs -n $NS deferrun/$POD -c compute   # from the bucket, with your own credentials"
AWS_ACCESS_KEY_ID=$E2E_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$E2E_SECRET_KEY \
	"$STATE/kdefer" logs -n "$NS" "deferrun/$POD" -c compute | tail -n 6
echo
if s3 cat "results/$NS/sim/$POD/_kdefer/manifest.json" | grep -q '"logWarnings"'; then
	log "the manifest has logWarnings: a log of $POD was not archived"
	STATE_NOW=LogsMissing
fi
log "done in $((SECONDS - start))s: defer run $STATE_NOW."
log "Look around: eval \"\$(test/cluster/cluster.sh env)\"; kubectl get deferruns -A; $STATE/s3 ls results"
log "Remove everything: make demo-down"
[[ $STATE_NOW == Succeeded ]]
