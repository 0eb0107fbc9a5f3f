# shellcheck shell=bash
# Shared by test/e2e/run.sh, test/demo/run.sh and test/upstream/run.sh
# (sourced, not run): the local cluster's script and directory; MinIO on
# the node address; kdefer deployed from deploy/overlays/local (the demo) or
# by helm install from the test registry (the e2e tier).
# Needs ROOT (the repository) set by the caller.

CLUSTER=$ROOT/test/cluster/cluster.sh
export KDEFER_CLUSTER_DIR=${KDEFER_CLUSTER_DIR:-$ROOT/bin/cluster}

E2E_MINIO_ADDR=${KDEFER_E2E_MINIO_ADDR:-10.88.0.1:9000}
E2E_MINIO_CONSOLE=127.0.0.1:0  # any free loopback port
# The test registry: the address the cluster's containerd pulls from over
# plain HTTP (test/cluster/cluster.sh registry_hosts).
E2E_REGISTRY=${KDEFER_REGISTRY:-10.88.0.1:5000}
# The same test credentials as test/s3server (local, short-lived servers).
E2E_ACCESS_KEY=kdefertest
E2E_SECRET_KEY=kdefertest-secret-key

# The cluster's own kubectl (KUBE_VERSION's, built with it) when cluster.sh env set it.
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
	local lock=${KDEFER_CLUSTER_LOCK:-/tmp/kdefer-cluster.lock}
	exec {KDEFER_LOCK_FD}>"$lock"
	if ! flock -n "$KDEFER_LOCK_FD"; then
		log "waiting for the other local-cluster run on this machine to finish; it holds $lock:"
		lock_holders "$lock" >&2
		log "(a make demo keeps its cluster, and the lock, until make demo-down)"
		flock "$KDEFER_LOCK_FD"
		log "the local cluster is free"
	fi
}

# lock_holders FILE: the processes other than this shell and its children
# holding FILE open (the cluster's daemons and MinIO inherit the lock's
# descriptor), one "PID COMMAND" line each.
lock_holders() {
	local fd pid
	for fd in /proc/[0-9]*/fd/*; do
		[[ $(readlink "$fd" 2>/dev/null) == "$1" ]] || continue
		pid=${fd#/proc/}
		pid=${pid%%/*}
		[[ $pid != "$$" && $(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null) != "$$" ]] || continue
		printf '  %s %s\n' "$pid" "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
	done | sort -un
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

# stop_daemon STATE_DIR NAME SECONDS: stops the NAME process whose pid
# STATE_DIR/NAME.pid holds (if that pid still runs NAME), killed after SECONDS.
stop_daemon() {
	local dir=$1 name=$2 secs=$3 pid
	[[ -f $dir/$name.pid ]] || return 0
	pid=$(cat "$dir/$name.pid")
	if kill -0 "$pid" 2>/dev/null && grep -q "$name" "/proc/$pid/cmdline" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		wait_until "$secs" "$name (pid $pid) to exit" bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/$name.pid"
}

# stop_minio STATE_DIR: stops the MinIO that start_minio started there.
stop_minio() { stop_daemon "$1" minio 20; }

# failure_story LOG...: for each test that failed in these `go test -v` logs,
# the first line of every message it logged (FILE.go:LINE: ...), its last 40:
# what it saw and why it failed. A failure's dump (the namespace's objects,
# component logs, a server's log tail) stays out: its headers are skipped and
# the rest is continuation lines. CI keeps a long run's output's end: this.
failure_story() {
	awk '
		/^=== (RUN|PAUSE|CONT|NAME) / { cur = $3; next }
		/^ *--- FAIL: / { if (!($3 in failed)) { failed[$3] = 1; order[++n] = $3 }; next }
		/^ +[A-Za-z0-9_]+\.go:[0-9]+: (kubectl |===== )/ { next } # the headers of a dump
		/^ +[A-Za-z0-9_]+\.go:[0-9]+: / && cur != "" { lines[cur, ++count[cur]] = $0 }
		END {
			for (i = 1; i <= n; i++) {
				t = order[i]
				c = count[t] + 0
				printf "--- FAIL: %s: %d message%s%s\n", t, c, (c == 1 ? "" : "s"), (c > 40 ? ", the last 40:" : "")
				for (j = (count[t] > 40 ? count[t] - 39 : 1); j <= count[t]; j++) print lines[t, j]
			}
		}' "$@"
}

kdefer_ready() {
	kubectl -n kdefer-system rollout status deploy/kdefer-controller --timeout=5s &&
		kubectl get mutatingwebhookconfiguration kdefer -o jsonpath='{.webhooks[0].clientConfig.caBundle}' | grep -q . &&
		{ ! kubectl get ds -n kdefer-node kdefer-node >/dev/null 2>&1 || kubectl -n kdefer-node rollout status ds/kdefer-node --timeout=5s; }
}

# deploy_kdefer: kdefer from deploy/overlays/local, waiting until its webhooks answer.
deploy_kdefer() {
	log "deploying kdefer (kubectl apply -k deploy/overlays/local)"
	kubectl apply -k "$ROOT/deploy/overlays/local" >/dev/null
	# A new image with the same tag is not picked up by an unchanged pod template.
	kubectl -n kdefer-system rollout restart deploy/kdefer-controller >/dev/null
	kubectl -n kdefer-node rollout restart ds/kdefer-node >/dev/null
	wait_until 120 "kdefer-controller to be ready with its webhook CA" kdefer_ready || {
		kubectl -n kdefer-system get pods -o wide >&2
		kubectl -n kdefer-system logs deploy/kdefer-controller --tail=40 >&2 || true
		return 1
	}
}

# deploy_kdefer_manifests STATE_DIR: kdefer as the README installs it
# without Helm, `kubectl apply --server-side -f manifests.yaml`: the file
# release_kdefer wrote (of deploy/overlays/local, the local cluster's
# variant), its images pulled from the test registry.
deploy_kdefer_manifests() {
	log "deploying kdefer (kubectl apply --server-side -f $1/release/manifests.yaml)"
	kubectl apply --server-side -f "$1/release/manifests.yaml" >/dev/null
	wait_until 120 "kdefer-controller to be ready with its webhook CA" kdefer_ready || {
		kubectl -n kdefer-system get pods -o wide >&2
		kubectl -n kdefer-system describe pods >&2 || true
		kubectl -n kdefer-system logs deploy/kdefer-controller --tail=40 >&2 || true
		return 1
	}
}

# build_images [NAMES]: the images (default all; e.g. pause,busybox) built
# from this tree into bin/images (KDEFER_BUILD_IMAGES=0 keeps what it holds),
# before cluster.sh up, which imports them into every node.
build_images() {
	[[ ${KDEFER_BUILD_IMAGES:-1} == 1 ]] || return 0
	# The images are built from Debian's busybox-static, one of the
	# packages the cluster needs: a new machine has none of them yet.
	"$ROOT/test/cluster/cluster.sh" deps
	log "building the images ${1:-of kdefer and the cluster} from this tree"
	go run ./test/images --out "${KDEFER_IMAGES_DIR:-$ROOT/bin/images}" ${1:+--only "$1"} >/dev/null
}

# registry_ready: the registry answers GET /v2/ with 200 (bash's /dev/tcp).
registry_ready() {
	(
		exec 3<>"/dev/tcp/${E2E_REGISTRY%:*}/${E2E_REGISTRY##*:}" || exit 1
		printf 'GET /v2/ HTTP/1.0\r\nHost: %s\r\n\r\n' "$E2E_REGISTRY" >&3
		IFS= read -r -t 2 line <&3 && [[ $line == *" 200 "* ]]
	)
}

# start_registry STATE_DIR: test/registry (go-containerregistry's registry,
# in memory) on $E2E_REGISTRY; pid in STATE_DIR/registry.pid.
start_registry() {
	local dir=$1
	stop_registry "$dir"
	mkdir -p "$dir"
	go build -o "$dir/registry" ./test/registry
	log "starting the test registry on $E2E_REGISTRY"
	setsid "$dir/registry" --addr "$E2E_REGISTRY" --quiet >"$dir/registry.log" 2>&1 </dev/null &
	echo $! >"$dir/registry.pid"
	wait_until 30 "the registry at $E2E_REGISTRY" registry_ready ||
		{ tail -20 "$dir/registry.log" >&2; return 1; }
}

# stop_registry STATE_DIR: stops the registry that start_registry started there.
stop_registry() { stop_daemon "$1" registry 10; }

# release_kdefer STATE_DIR [KUSTOMIZATION]: a release of this tree to the
# test registry, as `make release` makes one (hack/release), for this
# machine's platform and without the krew files: kdefer's images with their
# SBOMs and signatures (a key of the run's own) under $E2E_REGISTRY/kdefer,
# the chart at oci://$E2E_REGISTRY/kdefer/charts/kdefer and
# STATE_DIR/release/manifests.yaml (of KUSTOMIZATION, default deploy), its
# version the image builder's (git describe). Sets KDEFER_E2E_VERSION.
release_kdefer() {
	local dir=$1 k=${2:-deploy}
	log "releasing this tree to $E2E_REGISTRY/kdefer (hack/release)"
	go run ./hack/release --registry "$E2E_REGISTRY/kdefer" --platforms "linux/$(go env GOARCH)" \
		--krew=false --kustomization "$k" --out "$dir/release" >&2
	KDEFER_E2E_VERSION=$(sed 's/.*:\(v[^@]*\)@.*/\1/' "$dir/release/images/kdefer-controller.pushed")
	export KDEFER_E2E_VERSION
}

# push_managers STATE_DIR ARGS...: other projects' managers (--manager
# NAME:TAG=BIN, test/images) pushed to the test registry;
# STATE_DIR/pushed/NAME.pushed holds each REF@DIGEST.
push_managers() {
	local dir=$1
	shift
	rm -rf "$dir/pushed"
	(($#)) || return 0
	local only
	only=$(printf '%s\n' "$@" | sed -n 's/^\([a-z]*\):.*/\1/p' | paste -sd,)
	go run ./test/images --push "$E2E_REGISTRY" --ref-dir "$dir/pushed" --only "$only" "$@" >&2
}

# deploy_kdefer_helm STATE_DIR [-f VALUES.yaml]...: kdefer as the README
# installs it, `helm install kdefer oci://…/charts/kdefer --version X`, the
# chart release_kdefer pushed (test/helminstall: Helm's Go packages), with
# deploy/helm/local-values.yaml (the same objects as deploy/overlays/local:
# test/helmchart) and any more values files, and no image values: the
# released chart names the images it was released with, which the cluster
# pulls from the test registry.
deploy_kdefer_helm() {
	local dir=$1 chart=oci://$E2E_REGISTRY/kdefer/charts/kdefer
	shift
	# The scenarios that remove kdefer install it again from the same chart.
	export KDEFER_E2E_CHART=$chart
	log "deploying kdefer (helm install $chart --version ${KDEFER_E2E_VERSION#v})"
	# KDEFER_E2E_HELM_ARGS: more helminstall arguments (--set K=V), e.g. to
	# run the scenarios against kdefer without its node agent:
	#   --set nodeAgent.enabled=false
	# (local-values.yaml puts the controller's logs endpoint on its node's
	# address then).
	# shellcheck disable=SC2086
	"$dir/bin/helminstall" -n kdefer-system --chart "$chart" --version "${KDEFER_E2E_VERSION#v}" \
		-f deploy/helm/local-values.yaml "$@" ${KDEFER_E2E_HELM_ARGS:-} >&2
	wait_until 120 "kdefer-controller to be ready with its webhook CA" kdefer_ready || {
		kubectl -n kdefer-system get pods -o wide >&2
		kubectl -n kdefer-node get pods -o wide >&2
		kubectl -n kdefer-system describe pods >&2 || true
		kubectl -n kdefer-node describe pods >&2 || true
		kubectl -n kdefer-system logs deploy/kdefer-controller --tail=40 >&2 || true
		return 1
	}
}

# previous_commit: the release before this tree's (test/e2e/previous-release,
# its one line that is not a comment).
previous_commit() { grep -v '^#' "$ROOT/test/e2e/previous-release" | grep -m1 .; }

# release_previous STATE_DIR: the previous release (previous_commit) to the
# test registry beside this tree's, for TestUpgradeRollback: that commit
# checked out (git worktree add --detach) in a directory of its own and
# released by this tree's hack/release --src, which the commit may predate,
# for this machine's platform, its version its own image builder's (v0.1.0-g…
# until tags exist). STATE_DIR/release-previous holds its files and its
# deploy/helm/local-values.yaml (the values its chart is installed with).
# Sets KDEFER_E2E_PREVIOUS_VERSION and KDEFER_E2E_PREVIOUS_VALUES.
release_previous() {
	local dir=$1 commit src out=$1/release-previous t0=$SECONDS
	commit=$(previous_commit)
	src=$(mktemp -d "${TMPDIR:-/tmp}/kdefer-previous.XXXXXX")
	log "releasing the previous release, ${commit:0:12}, to $E2E_REGISTRY/kdefer (hack/release --src)"
	git -C "$ROOT" worktree add --detach --force "$src" "$commit" >/dev/null 2>&1 ||
		{ rm -rf "$src"; die "git worktree add $commit: a clone with the history (not shallow)?"; }
	local rc=0
	go run ./hack/release --src "$src" --registry "$E2E_REGISTRY/kdefer" --platforms "linux/$(go env GOARCH)" \
		--krew=false --notes=false --out "$out" >&2 || rc=$?
	if ((rc == 0)); then
		cp "$src/deploy/helm/local-values.yaml" "$out/local-values.yaml"
	fi
	git -C "$ROOT" worktree remove --force "$src" || rm -rf "$src"
	((rc == 0)) || return "$rc"
	KDEFER_E2E_PREVIOUS_VERSION=$(sed 's/.*:\(v[^@]*\)@.*/\1/' "$out/images/kdefer-controller.pushed")
	KDEFER_E2E_PREVIOUS_VALUES=$out/local-values.yaml
	export KDEFER_E2E_PREVIOUS_VERSION KDEFER_E2E_PREVIOUS_VALUES
	log "previous release $KDEFER_E2E_PREVIOUS_VERSION released in $((SECONDS - t0))s"
}
