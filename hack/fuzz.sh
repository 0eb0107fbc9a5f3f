#!/usr/bin/env bash
# make fuzz: a short run of every fuzz target in the module.
#
# Each package's test binary is built once, with fuzzing instrumentation
# (`go test -c -fuzz=.`), and then run once per target: `go test -fuzz`
# accepts one target per invocation and relinks (and, with a cold cache,
# recompiles) the package's instrumented test binary each time.
#
#   hack/fuzz.sh [FUZZTIME]   # default 10000x: a count of executions, not a
#                             # duration (Go 1.26's coordinator can fail a
#                             # duration-bounded run at its deadline with a
#                             # spurious "context deadline exceeded" on a
#                             # loaded machine, golang/go#75804)
#
# Minimization is bounded to 100 executions (also a count): the fuzzer
# minimizes every input that finds new coverage, by default for up to 60 s,
# and in a count-bounded run that minimization reserves half the count, so
# the other worker stops until it ends. FuzzWalk, whose executions build a
# tree on disk (0.2 s for a 40-deep one), stalled ~40 s per new input that
# way. A crasher is then reported less minimized; rerun it with
# `go test -run 'FuzzX/ID'` and minimize by hand, or with a longer
# -fuzzminimizetime.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10000x}
out=$PWD/bin/fuzz
mkdir -p "$out"
# The seed corpus and crashers stay where `go test -fuzz` keeps them.
cache=$(go env GOCACHE)/fuzz

# The default run gives each target a few seconds. FuzzWalk's executions
# build a tree on disk: ~250 a second on 2 cores against 2,000-5,000 for the
# others, so 10000x took it ~40 s, half the tier (w18, 2026-12-02); at the
# default it runs a fifth of the count. FuzzResolveBeneath builds a volume on
# disk per execution too (300-600 a second on 2 cores): 3000x. A FUZZTIME
# given applies to all.
declare -A default_count=([FuzzWalk]=2000x [FuzzResolveBeneath]=3000x)

declare -A targets
while IFS=: read -r file fn; do
	pkg=./$(dirname "$file")
	targets[$pkg]+="${fn#func } "
done < <(git ls-files '*_test.go' | xargs grep -Ho '^func Fuzz[A-Za-z0-9_]*')

# The import paths in one go list (each go command loads the module graph).
declare -A importpath
while read -r dir path; do importpath[./${dir#"$PWD"/}]=$path; done < <(go list -f '{{.Dir}} {{.ImportPath}}' "${!targets[@]}")

for pkg in $(printf '%s\n' "${!targets[@]}" | sort); do
	bin=$out/$(echo "${pkg#./}" | tr / _).test
	go test -c -fuzz=. -o "$bin" "$pkg"
	for fn in ${targets[$pkg]}; do
		t=$fuzztime
		[[ $fuzztime != 10000x || -z ${default_count[$fn]:-} ]] || t=${default_count[$fn]}
		echo "fuzz $pkg $fn ($t)"
		# A test binary runs in its package's directory, where testdata/fuzz is.
		(cd "$pkg" && "$bin" -test.run '^$' -test.fuzz "^$fn\$" -test.fuzztime "$t" \
			-test.fuzzminimizetime 100x -test.fuzzcachedir "$cache/${importpath[$pkg]}")
	done
done
