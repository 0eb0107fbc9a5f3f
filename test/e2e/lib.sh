# shellcheck shell=bash
# Shared by test/e2e/run.sh and test/demo/run.sh (sourced, not run): MinIO on
# the node address and kdefer deployed from deploy/overlays/local.
# Needs ROOT (the repository) set by the caller.

E2E_MINIO_ADDR=${KDEFER_E2E_MINIO_ADDR:-10.88.0.1:9000}
E2E_MINIO_CONSOLE=127.0.0.1:0  # any free loopback port
# The same test credentials as test/s3server (local, short-lived servers).
E2E_ACCESS_KEY=kdefertest
E2E_SECRET_KEY=kdefertest-secret-key

# The cluster's own kubectl (v1.34.4, built with it) when cluster.sh env set it.
kubectl() { command "${KDEFER_KUBECTL:-kubectl}" "$@"; }

log() { printf '[%s %s] %s\n' "${LOG_TAG:-e2e}" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# lock_cluster: the local cluster is one per machine (one kdefer0 bridge, one
# /var/lib/kubelet), and `cluster.sh up` tears down whatever runs; so a second
# e2e or demo run on the machine waits here for the first to finish instead
# of destroying its cluster mid-test. The lock goes with the process.
lock_cluster() {
	# A caller that already holds the lock (a wrapper timing a whole CI run)
	# says so, or its own child would wait for it forever.
	[[ ${KDEFER_CLUSTER_LOCK_HELD:-0} == 1 ]] && return 0
	exec {KDEFER_LOCK_FD}>"${KDEFER_CLUSTER_LOCK:-/tmp/kdefer-cluster.lock}"
	if ! flock -n "$KDEFER_LOCK_FD"; then
		log "waiting for the other local-cluster run on this machine to finish"
		flock "$KDEFER_LOCK_FD"
		log "the local cluster is free"
	fi
}

# wait_until SECONDS WHAT CMD...: run CMD every 0.5 s until it succeeds.
wait_until() {
	local limit=$1 what=$2; shift 2
	local end=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < end)) || { log "timed out after ${limit}s waiting for $what"; return 1; }
		sleep 0.5
	done
}

minio_bin() {
	local bin=${KDEFER_MINIO:-}
	[[ -n $bin ]] || bin="$("$ROOT/test/tools/install.sh" path minio)/minio"
	[[ -x $bin ]] || die "no MinIO at $bin: run 'test/tools/install.sh minio' (make tools)"
	printf '%s\n' "$bin"
}

# minio_ready: MinIO's cluster health endpoint answers 200 (bash's /dev/tcp: no
# curl needed). Not its readiness endpoint: that answers 200 before the object
# layer is up, and S3 requests then get 503.
minio_ready() {
	(
		exec 3<>"/dev/tcp/${E2E_MINIO_ADDR%:*}/${E2E_MINIO_ADDR##*:}" || exit 1
		printf 'GET /minio/health/cluster HTTP/1.0\r\nHost: %s\r\n\r\n' "$E2E_MINIO_ADDR" >&3
		IFS= read -r -t 2 line <&3 && [[ $line == *" 200 "* ]]
	)
}

# start_minio STATE_DIR: MinIO on the node address (pods reach it there) with
# its data in STATE_DIR/data; pid in STATE_DIR/minio.pid.
start_minio() {
	local dir=$1 bin
	bin=$(minio_bin)
	stop_minio "$dir"
	mkdir -p "$dir/data"
	log "starting MinIO on $E2E_MINIO_ADDR (data $dir/data)"
	MINIO_ROOT_USER=$E2E_ACCESS_KEY MINIO_ROOT_PASSWORD=$E2E_SECRET_KEY MINIO_BROWSER=off \
		MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
		setsid "$bin" server --quiet --address "$E2E_MINIO_ADDR" --console-address "$E2E_MINIO_CONSOLE" \
		"$dir/data" >"$dir/minio.log" 2>&1 </dev/null &
	echo $! >"$dir/minio.pid"
	wait_until 60 "MinIO at $E2E_MINIO_ADDR to be ready" minio_ready ||
		{ tail -20 "$dir/minio.log" >&2; return 1; }
}

# stop_minio STATE_DIR: stops the MinIO that start_minio started there.
stop_minio() {
	local dir=$1 pid
	[[ -f $dir/minio.pid ]] || return 0
	pid=$(cat "$dir/minio.pid")
	if kill -0 "$pid" 2>/dev/null && grep -q minio "/proc/$pid/cmdline" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		wait_until 20 "MinIO (pid $pid) to exit" bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/minio.pid"
}

kdefer_ready() {
	kubectl -n kdefer-system rollout status deploy/kdefer-controller --timeout=5s &&
		kubectl get mutatingwebhookconfiguration kdefer -o jsonpath='{.webhooks[0].clientConfig.caBundle}' | grep -q .
}

# deploy_kdefer: kdefer from deploy/overlays/local, waiting until its webhooks answer.
deploy_kdefer() {
	log "deploying kdefer (kubectl apply -k deploy/overlays/local)"
	kubectl apply -k "$ROOT/deploy/overlays/local" >/dev/null
	# A new image with the same tag is not picked up by an unchanged pod template.
	kubectl -n kdefer-system rollout restart deploy/kdefer-controller >/dev/null
	wait_until 120 "kdefer-controller to be ready with its webhook CA" kdefer_ready || {
		kubectl -n kdefer-system get pods -o wide >&2
		kubectl -n kdefer-system logs deploy/kdefer-controller --tail=40 >&2 || true
		return 1
	}
}

# build_images: kdefer's images from this tree, imported into the cluster
# (KDEFER_BUILD_IMAGES=0 keeps what bin/images holds).
build_images() {
	if [[ ${KDEFER_BUILD_IMAGES:-1} == 1 ]]; then
		log "building kdefer's images from this tree"
		go run ./test/images --out "${KDEFER_IMAGES_DIR:-$ROOT/bin/images}" >/dev/null
	fi
	"$ROOT/test/cluster/cluster.sh" load-images >&2
}
