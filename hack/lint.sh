#!/usr/bin/env bash
# make lint: golangci-lint over the module, seen at one path from every clone.
#
#   hack/lint.sh GOLANGCI_LINT [ARGS...]
#
# golangci-lint keys its analysis cache by each file's absolute path as well
# as its content (golangci/golangci-lint#6430), so a clone at a new path
# lints from scratch: in CI's fresh clone 140 s and 273 CPU-s, against 4 s in
# a clone linted before (2026-12-02). Newer releases drop the path from the
# key but replay a cached finding with the path of the clone that found it;
# once that clone is deleted, its //nolint comments and the path exclusions
# can no longer be read, and suppressed findings come back as failures
# (golangci/golangci-lint#6656, #6695). One path for every clone gives the
# cache hits without that: as root, with util-linux's unshare, lint runs in a
# mount namespace of its own in which this clone is bind-mounted at
# $KDEFER_LINT_ROOT. Each run has its own namespace, so clones that lint at
# once never see each other's tree, and they share the cache safely (the go
# command's design: atomic renames). Without root it runs in place.
set -euo pipefail
cd "$(dirname "$0")/.."
lint=$1
shift
root=${KDEFER_LINT_ROOT:-/run/kdefer-lint}
# golangci-lint takes a lock in $TMPDIR, one per machine by default: a run in
# one clone then waits for any other clone's run (seen: a CI run's lint tier
# stalled ~15 minutes behind a low-priority run elsewhere). Each clone gets
# its own lock directory.
mkdir -p bin/lint-tmp
export TMPDIR=$PWD/bin/lint-tmp
cmd=("$lint" run --allow-serial-runners "$@" ./...)
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
	mkdir -p "$root"
	exec unshare --mount --propagation private bash -euo pipefail -c '
		mount --bind "$1" "$2"
		cd "$2"
		shift 2
		exec "$@"' _ "$PWD" "$root" "${cmd[@]}"
fi
exec "${cmd[@]}"
