#!/usr/bin/env bash
# make e2e-upstream: Kubernetes' own e2e specs of Job, CronJob and
# TTLAfterFinished (test/e2e/apps of the cluster's release, without [Slow],
# [Serial], [Disruptive], [Flaky] or any [Feature:...]) on the local cluster,
# twice:
#   baseline  without kdefer; its JUnit report is cached by release, spec set
#             and test main in ~/.cache/kdefer/e2e-upstream, and run again only
#             when that key changes or the cache is missing
#             (KDEFER_UPSTREAM_BASELINE=1 runs it anyway);
#   kdefer    with kdefer installed as make e2e installs it (helm, images from
#             the test registry) and every Job of the specs' namespaces armed
#             by test/upstream/arm-kdefer.yaml, staging out to the test MinIO.
# Then test/upstream/report prints specs run, passed, failed and skipped per
# run and every spec green in the baseline that is not green with kdefer
# (the tier fails on any), and the stage-outs: kdefer's finished runs by
# result (its /metrics) and the manifests in the bucket.
#
# The specs' images (busybox, pause) are the local cluster's own, built from
# source by test/images and pushed to the test registry under the names and
# tags the release's image list gives them (e2e.test --print-images);
# KUBE_TEST_REPO_LIST points the framework there. Specs run in
# KDEFER_UPSTREAM_PROCS (default 8) Ginkgo processes, each spec in its own
# namespace. KDEFER_UPSTREAM_RUNS="baseline kdefer" chooses the runs.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export LOG_TAG=upstream
# shellcheck source=test/e2e/lib.sh
source "$ROOT/test/e2e/lib.sh"

STATE=$ROOT/bin/upstream
CACHE=${KDEFER_UPSTREAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kdefer/e2e-upstream}
PROCS=${KDEFER_UPSTREAM_PROCS:-8}
RUNS=${KDEFER_UPSTREAM_RUNS:-baseline kdefer}
BUCKET=upstream-e2e
# The specs: the apps SIG's Job, CronJob and TTLAfterFinished specs that
# need no more than a default cluster (Ginkgo labels: no feature off by
# default or of a particular environment, nothing slow, serial, disruptive
# or flaky).
FOCUS='\[sig-apps\] (Job|CronJob|TTLAfterFinished) '
LABELS='Feature: isEmpty && !Slow && !Serial && !Disruptive && !Flaky'
mkdir -p "$STATE" "$CACHE"
start=$SECONDS

"$ROOT/test/tools/install.sh" kube-e2e
E2E=$("$ROOT/test/tools/install.sh" path kube-e2e)
RELEASE=$("$E2E/e2e.test" --version)
# The baseline's cache key: the release, the test main (in $E2E's name) and
# the spec set.
KEY=$(printf '%s\n' "${E2E##*/}" "$FOCUS" "$LABELS" | sha256sum | cut -c1-12)
BASELINE=$CACHE/baseline-$RELEASE-$KEY.xml
[[ ${KDEFER_UPSTREAM_BASELINE:-0} == 1 ]] && rm -f "$BASELINE"

finish() {
	rc=$?
	set +e
	[[ -z ${recycler:-} ]] || kill "$recycler" 2>/dev/null
	if ((rc != 0)); then
		log "FAILED (exit $rc): component logs follow"
		"$CLUSTER" logs 40 2>&1 | tail -n 200
		kubectl -n kdefer-system logs deploy/kdefer-controller --tail=60 2>&1
	fi
	stop_minio "$STATE"
	stop_registry "$STATE"
	if [[ ${KDEFER_KEEP_CLUSTER:-0} == 1 ]]; then
		log "KDEFER_KEEP_CLUSTER=1: the cluster keeps running (test/cluster/cluster.sh down stops it)"
	else
		"$CLUSTER" down >&2 || rc=1
	fi
	log "e2e-upstream done in $((SECONDS - start))s, exit $rc"
	exit "$rc"
}
lock_cluster
trap finish EXIT

# One node: the specs' pods are small, and each armed pod's work volume
# takes one of its local PVs, so it gets more of them, and the Released ones
# are recycled while the specs run (recycle_pvs below).
build_images pause,busybox
KDEFER_CLUSTER_PVS=${KDEFER_CLUSTER_PVS:-96} "$CLUSTER" up >&2
eval "$("$CLUSTER" env)"
export KUBECONFIG

# The registry, the specs' images under their upstream names, and kdefer's.
start_registry "$STATE"
cat >"$STATE/repo-list.yaml" <<EOF
gcRegistry: $E2E_REGISTRY
promoterE2eRegistry: $E2E_REGISTRY/e2e-test-images
EOF
export KUBE_TEST_REPO_LIST=$STATE/repo-list.yaml
push_as=()
while read -r name ref; do push_as+=(--push-as "$name=$ref"); done < <("$E2E/e2e.test" --print-images)
log "pushing the images (busybox,pause) to $E2E_REGISTRY"
rm -rf "$STATE/pushed"
go run ./test/images --push "$E2E_REGISTRY" --ref-dir "$STATE/pushed" --only busybox,pause "${push_as[@]}" >&2
# kdefer as make e2e installs it: this tree released to the registry, its
# chart installed from there (deploy_kdefer_helm below).
[[ " $RUNS " != *" kdefer "* ]] || release_kdefer "$STATE"

# recycle_pvs: every Released local PV (an armed pod's work volume, its run
# ended) made Available again every 10 s, as the e2e scenarios' clean-up does.
recycle_pvs() { while sleep 10; do "$CLUSTER" recycle-pvs >/dev/null 2>&1 || true; done; }

# cluster_cpu: CPU seconds the cluster's programs (etcd, apiserver,
# controller-manager, scheduler, kubelet, containerd) and its pods (the
# kubepods cgroup, which keeps the time of pods that ended) have used so far:
# what the specs cost the machine, beside the test processes this script
# waits for. Not the containerd shims: one per pod, their time goes with them.
cluster_cpu() {
	local t=0 d pods=/sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage
	for d in /proc/[0-9]*; do
		case "$(cat "$d/comm" 2>/dev/null)" in containerd | etcd | kube-* | kubelet) ;; *) continue ;; esac
		t=$((t + $(awk '{print $14 + $15}' "$d/stat" 2>/dev/null || echo 0)))
	done
	t=$((t / $(getconf CLK_TCK)))
	[[ ! -r $pods ]] || t=$((t + $(<"$pods") / 1000000000))
	echo "$t"
}

# specs NAME: the specs, NAME's JUnit report in $STATE/NAME.xml.
specs() {
	local name=$1 t0=$SECONDS rc=0 c0
	c0=$(cluster_cpu)
	log "running the specs ($name, $PROCS processes)"
	rm -rf "${STATE:?}/$name"
	mkdir -p "$STATE/$name"
	# --timeout bounds the whole run (a spec's own waits are the framework's).
	"$E2E/ginkgo" run --procs="$PROCS" --focus="$FOCUS" --label-filter="$LABELS" --timeout=30m \
		--no-color --output-dir="$STATE/$name" --junit-report="$name.xml" "$E2E/e2e.test" -- \
		--kubeconfig="$KUBECONFIG" --kubectl-path="${KDEFER_KUBECTL:-kubectl}" \
		>"$STATE/$name.log" 2>&1 || rc=$?
	grep -E '^(Ran |FAIL|PASS|SUCCESS|Ginkgo ran)|\[FAIL\]' "$STATE/$name.log" | sort -u >&2 || true
	log "specs ($name): exit $rc in $((SECONDS - t0)) s; the cluster and its pods used $(($(cluster_cpu) - c0)) CPU-s"
	[[ -s $STATE/$name/$name.xml ]] || die "no JUnit report from the $name run: $STATE/$name.log"
	grep -Eq '^Ran [1-9]' "$STATE/$name.log" || die "the $name run ran no spec: $STATE/$name.log"
	cp "$STATE/$name/$name.xml" "$STATE/$name.xml"
}

recycle_pvs &
recycler=$!

if [[ " $RUNS " == *" baseline "* ]]; then
	if [[ -s $BASELINE ]]; then
		log "baseline of $RELEASE cached: $BASELINE"
	else
		specs baseline
		cp "$STATE/baseline.xml" "$BASELINE.tmp" && mv "$BASELINE.tmp" "$BASELINE"
	fi
fi
[[ " $RUNS " == *" kdefer "* ]] || exit 0
[[ -s $BASELINE ]] || die "no baseline of $RELEASE to compare with: run with KDEFER_UPSTREAM_RUNS=\"baseline kdefer\""

# kdefer, as make e2e installs it, and the arming.
rm -rf "$STATE/data"
start_minio "$STATE"
go run ./test/upstream/report bucket make "$E2E_MINIO_ADDR" "$BUCKET"
mkdir -p "$STATE/bin"
go build -o "$STATE/bin/" ./test/helminstall
deploy_kdefer_helm "$STATE"
url="s3://$BUCKET/{namespace}/{job}/{pod}/?endpoint=http://$E2E_MINIO_ADDR\&use_path_style=true\&region=us-east-1"
sed "s|STAGE_OUT_URL|$url|" test/upstream/arm-kdefer.yaml | kubectl apply -f - >&2
# And a Job that reaches the apiserver unarmed is refused: its spec fails.
kubectl apply -f test/upstream/armed-check.yaml >&2
# Policies take effect when the apiserver has read them: a Job of a labelled
# namespace, created in a dry run (admission runs, nothing is stored), comes
# back rendered once they do.
kubectl create namespace e2e-upstream-probe >/dev/null
kubectl label namespace e2e-upstream-probe e2e-framework=probe >/dev/null
armed() {
	kubectl -n e2e-upstream-probe create job probe --image="$E2E_REGISTRY/pause:probe" --dry-run=server \
		-o jsonpath='{.spec.template.metadata.annotations.kdefer\.io/rendered}' | grep -q .
}
wait_until 60 "the arming to take effect" armed
kubectl delete namespace e2e-upstream-probe --wait=false >/dev/null
specs kdefer

# The stage-outs: kdefer's finished runs by result, from its /metrics (the
# runs are gone with their namespaces), and the manifests in the bucket.
kubectl -n kdefer-system create serviceaccount e2e-upstream-scraper >/dev/null
kubectl create clusterrolebinding e2e-upstream-scraper --clusterrole=kdefer-metrics-reader \
	--serviceaccount=kdefer-system:e2e-upstream-scraper >/dev/null
token=$(kubectl -n kdefer-system create token e2e-upstream-scraper)
curl -fsSk -H "Authorization: Bearer $token" https://127.0.0.1:8443/metrics >"$STATE/metrics.txt"
log "kdefer's finished runs (kdefer_runs_total, by trigger and result):"
grep '^kdefer_runs_total' "$STATE/metrics.txt" >&2 || log "none"
succeeded=$(awk '/^kdefer_runs_total\{/ && /result="Succeeded"/ { n += $2 } END { print n + 0 }' "$STATE/metrics.txt")
read -r _ objects _ manifests < <(go run ./test/upstream/report bucket count "$E2E_MINIO_ADDR" "$BUCKET" "")
log "the bucket: $objects objects, $manifests stage-out manifests; $succeeded runs succeeded"
# Every run's story is in the controller's log (the runs went with their namespaces).
kubectl -n kdefer-system logs deploy/kdefer-controller >"$STATE/kdefer-controller.log" 2>&1 || true

rc=0
go run ./test/upstream/report junit --focus "$FOCUS" "$BASELINE" "$STATE/kdefer.xml" | tee "$STATE/report.txt" || rc=1
# The stage-outs: every run that succeeded wrote its manifest last.
((succeeded > 0)) || die "no run of kdefer's succeeded: were the specs' Jobs armed? ($STATE/kdefer-controller.log)"
((manifests >= succeeded)) || die "$succeeded runs succeeded, but the bucket holds $manifests stage-out manifests"
exit "$rc"
