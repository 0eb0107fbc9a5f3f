#!/usr/bin/env bash
# make test: every tier, timed, in the order that uses a 2-core machine best.
#
#   tools  (background) builds etcd, MinIO and Kubernetes (the newest release
#          and the oldest supported) and installs Azurite
#          (npm) once per version into ~/.cache/kdefer/tools; warm, it only
#          checks that they exist.
#   verify and fuzz need none of them, so they run while the tools build,
#          side by side.
#   unit   needs the tools (envtest's apiserver and etcd, MinIO, Azurite).
#   e2e    needs the tools and root, and starts as soon as they are there:
#          its set-up and its multi-node phase run beside the other tiers, its
#          single-node phase waits for the unit tier's end (test/e2e/run.sh
#          says why); KDEFER_SKIP_E2E=1 leaves it out.
#   e2e-oldest  a smoke subset of the e2e tier on the oldest supported
#          Kubernetes (make e2e-oldest; its binaries built with the tools),
#          after the e2e tier, on a cluster of its own.
#   e2e-upstream  Kubernetes' own Job, CronJob and TTLAfterFinished e2e
#          specs with kdefer arming every Job, against a baseline without it
#          cached by release (make e2e-upstream; e2e.test built with the
#          tools), after e2e-oldest, on a cluster of its own.
#
# Each tier's wall time goes to bin/tiers.tsv and is printed as a table at
# the end, green or red, so the tier budget (docs/development.md) is measured, not guessed.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
table=bin/tiers.tsv
: >"$table"
start=$SECONDS

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$table"; }

# cpu_now sets CPU to the CPU seconds (user + sys) this shell's finished
# children used so far, from the `times` builtin; a tier's CPU is the
# difference around it. With wall time it shows what overlaps and what 2
# cores can still absorb. `times` must run in this very shell: a pipe or a
# $(...) forks, and a forked child starts with no children's time.
cpu_now() {
	local f="bin/times.$BASHPID"
	times >"$f"
	CPU=$(awk 'NR == 2 {
		t = 0
		for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
		printf "%d\n", t
	}' "$f")
}

# tier NAME CMD...: runs CMD, records its wall time, CPU time and result.
tier() {
	local name=$1 t0=$SECONDS c0 rc=0; shift
	cpu_now
	c0=$CPU
	echo "=== tier $name: $*"
	"$@" || rc=$?
	cpu_now
	record "$name" "$((SECONDS - t0))" "$((CPU - c0))" "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")"
	return $rc
}

summary() {
	local rc=${1:-$?}
	restore_thp
	echo
	echo "tier       seconds  cpu-s  result"
	while IFS=$'\t' read -r name secs cpu result; do
		printf '%-10s %7s %6s  %s\n' "$name" "$secs" "$cpu" "$result"
	done <"$table"
	cpu_now
	printf '%-10s %7s %6s  %s\n' total "$((SECONDS - start))" "$CPU" "$([ $rc = 0 ] && echo ok || echo FAILED)"
}
trap summary EXIT

# Transparent huge pages for the tool builds. This VM (Firecracker, 2 cores)
# pays dearly for 4 KiB page faults: a cold `go build` of client-go and
# controller-runtime took 405 CPU-s with the kernel's default (madvise, which
# Go's heap never asks for) and 307 with THP always (sys 93 -> 42 s, user
# 312 -> 265 s; 2026-12-02, empty GOCACHE each). The tests gain too (stageout,
# stagein and test/envtest 113/101 CPU-s against 153/135), but with the e2e
# cluster's daemons started under huge pages the one-node phase took 421 and
# 503 s (w16, w17) against 392 and 396 s (w13, w14), more than the unit tier
# gained (233-254 s against 288-295). The cluster starts as soon as the tools
# are built, so the previous mode comes back then (and on exit): a cold run's
# verify and fuzz, beside the tool builds, keep huge pages almost throughout,
# a warm run's lose them after the 2 s the tools take to check. Only when
# asked (KDEFER_TUNE_THP=1: .ci/run asks, on CI's throwaway machine) and as
# root: `make test` leaves a developer's kernel settings alone.
thp=/sys/kernel/mm/transparent_hugepage/enabled
thp_was=
if [[ ${KDEFER_TUNE_THP:-0} == 1 && -w $thp ]]; then
	thp_was=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "$thp")
	if [[ $thp_was == always ]] || ! echo always >"$thp" 2>/dev/null; then
		thp_was=
	else
		echo "=== transparent huge pages: always for the builds (was $thp_was)"
	fi
fi
# restore_thp: the previous mode again, once (the tools' subshell restores
# it, the main shell's later calls then find it restored).
restore_thp() {
	[[ -n $thp_was ]] || return 0
	[[ $(sed -n 's/.*\[\(.*\)\].*/\1/p' "$thp") == "$thp_was" ]] ||
		{ echo "$thp_was" >"$thp" && echo "=== transparent huge pages: $thp_was again"; }
	thp_was=
}

# The tools' result goes to a file too: the e2e tier, a sibling, waits on it.
tools_log=bin/tools.log tools_rc=bin/tools.rc
rm -f "$tools_rc"
(
	t0=$SECONDS rc=0
	# The oldest supported Kubernetes too (make e2e-oldest runs on it), unless
	# the e2e tier is left out. In the same chain: the cores are busy through
	# a cold run, so a build beside the unit tier would cost as much wall time
	# and load the time-bounded scenarios beside it.
	targets=tools
	[[ ${KDEFER_SKIP_E2E:-0} == 1 ]] || targets="tools tools-oldest tools-e2e-upstream"
	# shellcheck disable=SC2086
	make --no-print-directory $targets >"$tools_log" 2>&1 || rc=$?
	restore_thp
	cpu_now
	record tools "$((SECONDS - t0))" "$CPU" "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")"
	echo "$rc" >"$tools_rc"
	exit $rc
) &
tools_pid=$!

# The generated files first: the e2e tier builds from the tree while verify
# checks it, and controller-gen rewrites its files (and the chart's copies of
# deploy/) even when nothing changed. verify then compares what is there.
tier generate make --no-print-directory generate

# The e2e tier starts when the tools are there: its set-up (cluster, images,
# registry, MinIO, kdefer: ~200 s warm) and its multi-node phase run beside
# verify, fuzz and the unit tier; its single-node phase waits for the unit
# tier's end (the gate file), so no time bound of its scenarios is measured
# against unit tests' load. Its output goes to bin/e2e.log and is shown, then
# followed, after the unit tier. A failed tier before writes "stop" into the
# gate, which ends it at its next phase.
e2e_pid=
gate=bin/e2e.gate
rm -f "$gate"
open_gate() { [[ -z $e2e_pid || -s $gate ]] || echo "$1" >"$gate"; }
if [[ ${KDEFER_SKIP_E2E:-0} == 1 ]]; then
	echo "KDEFER_SKIP_E2E=1: the e2e tier is left out"
else
	(
		# The Debian packages the cluster and its images need (containerd,
		# runc, CNI plugins, busybox-static, ...), installed while the tools
		# build: on a new machine apt takes about a minute, mostly waiting on
		# the network (cluster.sh deps; a no-op when they are there).
		t0=$SECONDS rc=0
		test/cluster/cluster.sh deps >bin/e2e.log 2>&1 || rc=$?
		echo "[e2e] cluster.sh deps: $((SECONDS - t0)) s" >>bin/e2e.log
		if [[ $rc != 0 ]]; then
			cpu_now
			record e2e "$((SECONDS - t0))" "$CPU" "FAILED ($rc): cluster.sh deps"
			exit $rc
		fi
		# A stop written into the gate while the tools build (verify or fuzz
		# failed) ends it at once, so the red result does not wait for them.
		while [[ ! -s $tools_rc ]]; do
			[[ ! -s $gate ]] || exit 1
			sleep 1
		done
		[[ $(<"$tools_rc") == 0 ]] || exit 1 # the main shell reports it
		t0=$SECONDS rc=0
		KDEFER_E2E_AFTER=$gate make --no-print-directory e2e >>bin/e2e.log 2>&1 || rc=$?
		cpu_now
		c0=$CPU
		record e2e "$((SECONDS - t0))" "$CPU" "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")"
		[[ $rc == 0 ]] || exit $rc
		# The smoke subset on the oldest supported Kubernetes, on a cluster
		# of its own, after the e2e tier's (one cluster at a time); alone on
		# the machine, as the single-node phase is.
		t0=$SECONDS
		make --no-print-directory e2e-oldest >>bin/e2e.log 2>&1 || rc=$?
		cpu_now
		record e2e-oldest "$((SECONDS - t0))" "$((CPU - c0))" "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")"
		c0=$CPU
		[[ $rc == 0 ]] || exit $rc
		# Kubernetes' own Job and CronJob specs with kdefer arming every
		# Job (and, when the release has no cached baseline, without it
		# first), on a cluster of its own, alone on the machine too.
		t0=$SECONDS
		make --no-print-directory e2e-upstream >>bin/e2e.log 2>&1 || rc=$?
		cpu_now
		record e2e-upstream "$((SECONDS - t0))" "$((CPU - c0))" "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")"
		exit $rc
	) &
	e2e_pid=$!
	# A failed tier stops the e2e tier before its next phase (the cluster is
	# torn down), and its result waits for it.
	on_exit() {
		local rc=$?
		open_gate "stop: a tier before the single-node scenarios failed"
		[[ -z $e2e_pid ]] || wait "$e2e_pid" || true
		summary "$rc"
	}
	trap on_exit EXIT
fi

# verify and fuzz side by side: neither has a time bound, and each alone
# leaves part of the 2 cores idle (lint's and vet's package loading, the
# fuzz binaries' links and baseline runs); fuzz's output follows verify's.
# Both compile most of the module's dependencies on a cold machine; with
# memory to spare, GOGC=400 trades it for the compilers' CPU (a cold build of
# client-go and controller-runtime: 291 CPU-s against 307, 2026-12-02), as the
# tool builds do. The unit tier keeps the default: its tests measure memory.
fuzz_log=bin/fuzz.log
( GOGC=400 tier fuzz make --no-print-directory fuzz >"$fuzz_log" 2>&1 ) &
fuzz_pid=$!
verify_rc=0
GOGC=400 tier verify make --no-print-directory verify GENERATED=1 UNIT=1 || verify_rc=$?
fuzz_rc=0
wait "$fuzz_pid" || fuzz_rc=$?
cat "$fuzz_log"
((verify_rc == 0 && fuzz_rc == 0)) || exit 1

echo "=== waiting for the tool builds (log: $tools_log)"
if ! wait "$tools_pid"; then
	tail -n 50 "$tools_log"
	exit 1
fi
cat "$tools_log"
restore_thp
make --no-print-directory envtest-assets >/dev/null
tier unit make --no-print-directory unit
if [[ -n $e2e_pid ]]; then
	open_gate go
	echo "=== tier e2e: make --no-print-directory e2e (set-up and multi-node phase beside the other tiers; log: bin/e2e.log)"
	rc=0
	tail -n +1 -f --pid="$e2e_pid" bin/e2e.log || true
	wait "$e2e_pid" || rc=$?
	e2e_pid=
	exit $rc
fi
