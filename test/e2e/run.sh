#!/usr/bin/env bash
# make e2e: kdefer's trigger matrix on the local cluster, in two phases.
#   1. builds the cluster's own images (pause, busybox; KDEFER_BUILD_IMAGES=0
#      keeps bin/images as it is);
#   2. starts a cluster of three nodes (test/cluster/cluster.sh up --nodes 3),
#      which imports them, whose pods stay on the first node unless their
#      namespace names another (KDEFER_CLUSTER_DEFAULT_NODE_SELECTOR), stopped
#      again on exit unless KDEFER_KEEP_CLUSTER=1;
#   3. starts the test registry (test/registry) on 10.88.0.1:5000 and
#      releases this tree there as make release does (hack/release: images,
#      SBOMs, signatures, the OCI chart, manifests.yaml), and, for
#      TestUpgradeRollback, the previous release too (lib.sh release_previous:
#      the commit test/e2e/previous-release names);
#   4. starts MinIO on the host's bridge address 10.88.0.1:9000 (pods reach it there);
#   5. deploys kdefer, for each phase, as the README says: helm install (then
#      upgrade) of the released chart, oci://10.88.0.1:5000/kdefer/charts/kdefer
#      --version X, with deploy/helm/local-values.yaml and the phase's values
#      and no image values (test/helminstall), its images pulled from the
#      registry (test/helmchart checks that the chart installs the objects of
#      deploy/overlays/local, which make demo applies);
#      KDEFER_E2E_INSTALL=manifests: `kubectl apply --server-side -f
#      manifests.yaml` of the release instead (of deploy/overlays/local: make
#      e2e-oldest installs so); KDEFER_E2E_INSTALL=kustomize: that overlay
#      with imported tarballs, no registry;
#   6. the multi-node phase: kdefer with two replicas and leader election that
#      may run on any node (test/e2e/multinode-values.yaml), then the
#      TestMultiNode* scenarios (the test binary of ./test/e2e, -tags e2e: one
#      package, -v output streams; extra test flags: KDEFER_E2E_FLAGS, e.g.
#      KDEFER_E2E_FLAGS='-run TestSucceeded');
#   7. the single-node phase, on the same cluster: kdefer upgraded to the one
#      replica of local-values.yaml, on the first node again, then every
#      scenario but TestMultiNode*: those written for one node on the first
#      node, those that disrupt a node on the second and third
#      (test/e2e/lanes_test.go);
#   on failure, dumps the component logs and kdefer's.
# KDEFER_E2E_PHASES="multi single" chooses the phases and their order; by default
# both, and with a -run in KDEFER_E2E_FLAGS only those whose scenarios it names
# (multi: TestMultiNode...).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export LOG_TAG=e2e
# shellcheck source=test/e2e/lib.sh
source "$ROOT/test/e2e/lib.sh"

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
		# Last: CI keeps the end of a long run's output.
		log "what the failed tests logged:"
		failure_story "$STATE"/run-*.log 2>/dev/null
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

# run_alternatives: the alternatives of KDEFER_E2E_FLAGS' -run pattern, one a
# line (^(TestA|TestB)$ gives TestA and TestB); nothing without a -run.
run_alternatives() {
	local flags=" ${KDEFER_E2E_FLAGS:-} " pat
	[[ $flags =~ [[:space:]]-{1,2}run[=[:space:]]+([^[:space:]]+) ]] || return 0
	pat=${BASH_REMATCH[1]}
	tr -d "\"'^\$()" <<<"$pat" | tr '|' '\n'
}

# phases: the ones KDEFER_E2E_PHASES names; by default "multi single", and
# with a -run pattern only the phases of the scenarios it names. The
# multi-node phase first: under make test it runs while the unit tier does
# (see wait_gate's caller), the single-node phase after.
phases() {
	if [[ -n ${KDEFER_E2E_PHASES:-} ]]; then echo "$KDEFER_E2E_PHASES"; return; fi
	local alts
	alts=$(run_alternatives)
	[[ -z $alts ]] && { echo "multi single"; return; }
	grep -q '^TestMultiNode' <<<"$alts" && printf 'multi '
	grep -qv '^TestMultiNode' <<<"$alts" && printf 'single'
	echo
}

# multi_run: the multi-node phase's -run: the TestMultiNode scenarios that
# KDEFER_E2E_FLAGS names, or all of them (a later -run wins over the flags' own).
multi_run() {
	local alts
	alts=$(run_alternatives | grep '^TestMultiNode' | paste -sd '|')
	if [[ -n $alts ]]; then echo "^($alts)"; else echo "^TestMultiNode"; fi
}

# The single-node scenarios that stop kdefer itself, or change its install
# (TestNamespacedInstall: a helm upgrade to a namespaced install and back;
# TestUninstall: kdefer removed by helm and by kubectl, and installed again):
# go test runs them one at a time, and run.sh before the others (see the
# single-node phase below), so every other scenario sees kdefer up and
# installed cluster-wide.
# TestUpgradeRollback: helm upgrades to the previous release and back.
OUTAGES='TestControllerKilled|TestKdeferDown|TestNamespacedInstall|TestUninstall|TestUpgradeRollback'
# outage_run: their -run, or those of them KDEFER_E2E_FLAGS names; nothing
# when it names none of them.
outage_run() {
	local alts
	alts=$(run_alternatives)
	[[ -z $alts ]] && { echo "^($OUTAGES)\$"; return; }
	alts=$(grep -E "^($OUTAGES)(/|\$)" <<<"$alts" | paste -sd '|')
	[[ -z $alts ]] || echo "^($alts)"
}

# cpu_ticks: CPU time (clock ticks) of this shell's waited children, and of
# the cluster's running programs and pods: what setting a cluster up cost.
cpu_ticks() {
	local t d
	t=$(awk '{print $16 + $17}' /proc/$$/stat)
	for d in /proc/[0-9]*; do
		case "$(cat "$d/comm" 2>/dev/null)" in containerd* | etcd | kube-* | kubelet) ;; *) continue ;; esac
		tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF "$KDEFER_CLUSTER_DIR/" || continue
		t=$((t + $(awk '{print $14 + $15}' "$d/stat" 2>/dev/null || echo 0)))
	done
	echo "$t"
}

# cluster_up ARGS...: cluster.sh up, logging its wall and CPU seconds.
cluster_up() {
	local t0=$SECONDS c0 tck
	c0=$(cpu_ticks)
	"$CLUSTER" up "$@" >&2
	tck=$(getconf CLK_TCK)
	log "cluster up ${*:-(one node)}: $((SECONDS - t0)) s, $((($(cpu_ticks) - c0) / tck)) CPU-s (cluster.sh, its commands and the cluster's programs)"
}

# run_tests PHASE GO_TEST_FLAGS...: the e2e package, KDEFER_E2E_RUNS times.
run_tests() {
	local phase=$1 i failed=0 runs=${KDEFER_E2E_RUNS:-1}
	shift
	log "running the $phase-node e2e tests"
	# -parallel: the harness bounds the scenarios (lanes_test.go; side by side
	# they keep both cores busy, vmstat through w14): the first node's 8 at once, the
	# other nodes' one each. go test's own bound is above every scenario: at
	# 16, the first node's waiting scenarios held the slots and the other
	# nodes' scenarios waited behind them (c6: the drain lane idle 123 s, the
	# disk lane 58 s, their last scenario ending 374 s into a 406 s phase).
	# KDEFER_E2E_RUNS=N (make e2e-soak N=…) runs the whole tier N times on this one
	# cluster and prints a table of scenario × run; any failed run fails the tier.
	# Nothing is retried: a scenario that fails once in N is a bug to find.
	for ((i = 1; i <= runs; i++)); do
		((runs == 1)) || log "e2e run $i of $runs ($phase)"
		# shellcheck disable=SC2086
		binary_flags ${KDEFER_E2E_FLAGS:-} "$@"
		if ! (cd "$ROOT/test/e2e" && KDEFER_REQUIRE_TOOLS=1 "$KDEFER_E2E_BIN/e2e.test" -test.count=1 -test.timeout=30m \
			-test.parallel=64 -test.v "${BFLAGS[@]}") 2>&1 | tee "$STATE/run-$phase-$i.log"; then
			failed=$((failed + 1))
		fi
	done
	((runs == 1)) || "$ROOT/test/e2e/soak-table.sh" "$STATE"/run-"$phase"-*.log
	((failed == 0)) || { log "$failed of $runs $phase-node e2e runs failed"; return 1; }
}

# binary_flags ARGS...: BFLAGS, go test's flags as the test binary takes them
# (-run X is -test.run X): the package's test binary is built once for every
# phase and run (KDEFER_E2E_FLAGS hold test flags: -run, -skip, -v, -count,
# -timeout, -parallel, -failfast, -short, -shuffle, -list).
binary_flags() {
	BFLAGS=()
	local a f
	for a in "$@"; do
		f=${a#-}
		f=${f#-}
		case ${f%%=*} in
		run | skip | v | count | timeout | parallel | failfast | short | shuffle | list) BFLAGS+=("-test.$f") ;;
		*) BFLAGS+=("$a") ;;
		esac
	done
}

# Other projects' managers (test/tools/install.sh kueue, jobset) are pushed
# with kdefer's images in the single-node phase, where their scenarios run;
# the first scenario of each installs it (test/e2e/*_install_test.go) from
# the module's manifests, kept next to the binary: they cost nothing to the
# runs that do not use them. Each NAME's scenarios get
# KDEFER_E2E_NAME_IMAGE (what was pushed) and KDEFER_E2E_NAME_CONFIG (the
# module's config/components), or KDEFER_E2E_NAME_SKIP with the reason.
MANAGERS="kueue jobset"
# manager_named NAME: KDEFER_E2E_FLAGS names no -run, or one that names a
# scenario of NAME's (TestKueue..., TestJobSet...): a smoke subset such as
# make e2e-oldest's pushes neither manager.
manager_named() {
	local alts
	alts=$(run_alternatives)
	[[ -z $alts ]] || grep -qi "^Test$1" <<<"$alts"
}
manager_push_args() {
	[[ " $1 " == *" single "* ]] || return 0
	local m d
	for m in $MANAGERS; do
		manager_named "$m" || continue
		d=$("$ROOT/test/tools/install.sh" path "$m")
		[[ -x $d/$m ]] && echo "--manager $m:${d##*/"$m"-}=$d/$m"
	done
	return 0
}
# drop_managers: the other projects' managers and their webhooks, gone.
drop_managers() {
	local m
	for m in $MANAGERS; do
		kubectl delete namespace "$m-system" --ignore-not-found --wait=false >/dev/null
		kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name |
			{ grep "/$m-" || true; } | xargs -r kubectl delete --ignore-not-found >/dev/null
	done
}
manager_env() {
	local m M d
	for m in $MANAGERS; do
		M=${m^^}
		d=$("$ROOT/test/tools/install.sh" path "$m")
		unset "KDEFER_E2E_${M}_IMAGE" "KDEFER_E2E_${M}_CONFIG" "KDEFER_E2E_${M}_SKIP"
		if [[ -s $STATE/pushed/$m.pushed ]]; then
			export "KDEFER_E2E_${M}_IMAGE=$(<"$STATE/pushed/$m.pushed")" "KDEFER_E2E_${M}_CONFIG=$d/config"
		elif [[ $install == kustomize ]]; then
			export "KDEFER_E2E_${M}_SKIP=KDEFER_E2E_INSTALL=kustomize: no test registry for the $m image"
		fi
	done
}

# previous_named PHASES: the single-node phase runs TestUpgradeRollback
# (KDEFER_E2E_FLAGS names no -run, or one that names it), which needs the
# previous release (release_previous).
previous_named() {
	[[ " $1 " == *" single "* ]] || return 1
	local alts
	alts=$(run_alternatives)
	[[ -z $alts ]] || grep -q '^TestUpgradeRollback' <<<"$alts"
}

# The MinIO binary for tests that run their own server (test/s3server).
KDEFER_MINIO=$(minio_bin)
export KDEFER_MINIO
export KDEFER_E2E_S3=$E2E_MINIO_ADDR
rm -f "$STATE"/run-*.log
# KDEFER_E2E_INSTALL=kustomize: kdefer's images imported as tarballs and
# deploy/overlays/local applied, as make demo does (no registry, no helm);
# manifests: the release's manifests.yaml applied server-side.
install=${KDEFER_E2E_INSTALL:-helm}
case $install in helm | manifests | kustomize) ;; *) die "KDEFER_E2E_INSTALL=$install: helm, manifests or kustomize" ;; esac
PHASES=$(phases)
log "e2e phases: $PHASES"
# One cluster of three nodes for both phases. In the single-node phase the
# pods of a namespace that names no node stay on the first (the cluster's
# default node selector): kdefer's manager, the other projects' managers and
# every scenario written for one node; the scenarios that disrupt their node
# take one of the other two each (test/e2e/lanes_test.go).
# The images the nodes import are built first (kustomize: kdefer's too; helm:
# the cluster's own, kdefer's come from the test registry), so that cluster.sh
# neither builds nor imports anything twice (w18: ~50 s of the set-up).
if [[ $install == kustomize ]]; then
	build_images
else
	build_images pause,busybox
fi
KDEFER_CLUSTER_KDEFER_IMAGES=$([[ $install == kustomize ]] && echo 1 || echo 0) \
	KDEFER_CLUSTER_DEFAULT_NODE_SELECTOR=kubernetes.io/hostname=${KDEFER_NODE_NAME:-kdefer-node} cluster_up --nodes 3
eval "$("$CLUSTER" env)"
export KUBECONFIG
# shellcheck disable=SC2046
if [[ $install != kustomize ]]; then
	t0=$SECONDS
	start_registry "$STATE"
	release_kdefer "$STATE" "$([[ $install == manifests ]] && echo deploy/overlays/local || echo deploy)"
	push_managers "$STATE" $(manager_push_args "$PHASES")
	export KDEFER_E2E_CHART=oci://$E2E_REGISTRY/kdefer/charts/kdefer
	if [[ $install == helm ]] && previous_named "$PHASES"; then
		release_previous "$STATE"
	fi
	log "registry started and kdefer $KDEFER_E2E_VERSION released to it in $((SECONDS - t0))s"
fi
manager_env
# The programs scenarios run on the host or put into an image, built here,
# while the unit tier runs: linked by a scenario under the others' load,
# kdefer's CLI took ~70 s of TestDeadlineThenRetry's 147 (c6, 2026-12-02).
rm -rf "$STATE/bin"
# The e2e package's test binary and the helm installer too, each linked once
# for every phase (w19: 24 links, 98 CPU-s, while set-up, verify and fuzz
# ran side by side).
CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" -o "$STATE/bin/" ./cmd/kdefer ./test/e2e/inspect ./test/helminstall
# The PromQL evaluator TestMetricsEvaluated runs: a module of its own
# (test/promql), out of kdefer's dependency graph.
CGO_ENABLED=0 go -C test/promql build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" -o "$STATE/bin/promql" .
CGO_ENABLED=0 go test -c -tags e2e -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" -o "$STATE/bin/e2e.test" ./test/e2e
export KDEFER_E2E_BIN=$STATE/bin
rm -rf "$STATE/data" # the bucket starts empty
start_minio "$STATE"
# wait_gate: under make test, KDEFER_E2E_AFTER names a file the unit tier's
# end writes "go" into; anything else in it stops the tier here.
wait_gate() {
	[[ -n ${KDEFER_E2E_AFTER:-} ]] || return 0
	log "waiting for $KDEFER_E2E_AFTER before the scenarios"
	while [[ ! -s $KDEFER_E2E_AFTER ]]; do sleep 1; done
	gate_stopped && die "not running the scenarios: $KDEFER_E2E_AFTER says $(<"$KDEFER_E2E_AFTER")"
	return 0
}
# gate_stopped: the gate says stop (an earlier tier failed).
gate_stopped() {
	[[ -n ${KDEFER_E2E_AFTER:-} && -s $KDEFER_E2E_AFTER && $(<"$KDEFER_E2E_AFTER") != go ]]
}

rc_tests=0
first=1
for phase in $PHASES; do
	case "$phase" in
	single | multi) ;;
	*) die "KDEFER_E2E_PHASES: unknown phase $phase (single, multi)" ;;
	esac
	gate_stopped && die "not running the $phase-node scenarios: $KDEFER_E2E_AFTER says $(<"$KDEFER_E2E_AFTER")"
	t0=$SECONDS
	if [[ $phase == multi ]]; then
		# kdefer's replicas may run on any node (its namespace says so
		# before they are made); the other projects' managers, which only
		# the single-node phase uses, are gone.
		((first)) || drop_managers
		kubectl create namespace kdefer-system >/dev/null 2>&1 || true
		kubectl annotate --overwrite namespace kdefer-system scheduler.alpha.kubernetes.io/node-selector= >/dev/null
	elif ! ((first)); then
		# Back to the cluster's default node selector: the upgrade's new pod
		# (its template changes with the values) is made on the first node.
		kubectl annotate namespace kdefer-system scheduler.alpha.kubernetes.io/node-selector- >/dev/null
	fi
	if [[ $install == kustomize ]]; then
		deploy_kdefer
	elif [[ $install == manifests ]]; then
		deploy_kdefer_manifests "$STATE"
	elif [[ $phase == multi ]]; then
		# Two replicas, leader election, a budget: what the chart installs by default.
		deploy_kdefer_helm "$STATE" -f test/e2e/multinode-values.yaml
	else
		deploy_kdefer_helm "$STATE"
	fi
	log "kdefer installed ($install) and ready in $((SECONDS - t0))s; $((SECONDS - start))s since the start"
	# make test starts this set-up beside verify, fuzz and the unit tier.
	# The single-node phase's scenarios that run side by side (eight at a
	# time on one node) and TestBurst (40 pods at once) wait for the unit
	# tier's end (wait_gate), so that their time bounds never run on a
	# machine busy with unit tests. The multi-node phase does not wait: its
	# scenarios, one at a time, mostly wait on the cluster's own timers
	# (PodGC's 40 s quarantine of a lost node's pods, kdefer's
	# nodeLostTimeout, a Lease changing hands), and run after the single-node
	# phase they left the machine half idle for ~250 s (w18, 2026-12-02:
	# vmstat 52% idle), so they run beside the unit tier instead.
	first=0
	case "$phase" in
	single)
		# The scenarios that stop kdefer run before the gate too: they
		# wait on kdefer's restart and the cluster's reaction, and left the
		# machine 36% idle through their ~90 s between TestBurst and the
		# parallel scenarios (w18); they hold kdefer down, so nothing else
		# of this phase runs beside them.
		outage=$(outage_run)
		if [[ -n $outage ]]; then run_tests outage -run "$outage" || rc_tests=1; fi
		wait_gate
		run_tests single -skip "^(TestMultiNode|$OUTAGES)" || rc_tests=1
		;;
	multi) KDEFER_E2E_MULTINODE=1 run_tests multi -run "$(multi_run)" || rc_tests=1 ;;
	esac
done
exit "$rc_tests"
