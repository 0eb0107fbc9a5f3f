#!/usr/bin/env bash
# Keeps the newest release's wrapper module on kdefer's dependency versions,
# so that building Kubernetes reuses what kdefer's own build compiled.
#
#   test/tools/kube/shared.sh align WRAPPER_DIR   # require kdefer's version of every module both graphs share, when newer
#   test/tools/kube/shared.sh check WRAPPER_DIR   # fails when such a module is older in the wrapper than in kdefer
#   test/tools/kube/shared.sh count WRAPPER_DIR   # packages of the kube+etcd build that kdefer's tests compile too
#
# Go's build cache reuses a compiled package only when the package and every
# package it depends on are at the same module versions (and flags: both
# builds use CGO_ENABLED=0 -trimpath). Where the two graphs select different
# versions of a module, neither build's packages of it (nor anything above
# them) serve the other. `align` takes the newer of the two for every shared
# module (kdefer's go.mod is never changed: a module Kubernetes needs newer
# than kdefer has is told, and stays unshared until kdefer moves); `check`
# (in `make verify`) catches a kdefer bump that left the wrapper behind;
# `count` measures what the alignment saves.
set -euo pipefail

root=$(cd "$(dirname "$0")/../../.." && pwd)
cmd=${1:?usage: shared.sh align|check|count WRAPPER_DIR}
wrapper=${2:?usage: shared.sh align|check|count WRAPPER_DIR}
export CGO_ENABLED=0 GOFLAGS=-trimpath

# modules: "path version" of every module that provides a package to
# kdefer's build and tests (main) or to the kube+etcd build (wrapper): only
# those meet in the build cache (the replacement's version for a replaced
# module: the version that is compiled).
# The wrapper's build: the packages its go.mod lists as tools (Kubernetes'
# binaries and etcd; MinIO in test/tools/minio).
mapfile -t kube_pkgs < <(cd "$wrapper" && go mod edit -json | awk -F'"' '/^\t"Tool": \[/ { tool = 1; next } tool && /^\t\]/ { tool = 0 } tool && $2 == "Path" { print $4 }')
[ ${#kube_pkgs[@]} -gt 0 ] || { echo "[kube-shared] $wrapper/go.mod lists no tool to build" >&2; exit 2; }
modfmt='{{with .Module}}{{if not .Main}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}{{end}}'
modules() {
	case "$1" in
	main) (cd "$root" && go list -deps -test -f "$modfmt" ./...) ;;
	wrapper) (cd "$wrapper" && GOFLAGS=-mod=mod go list -deps -f "$modfmt" "${kube_pkgs[@]}") ;;
	esac | sort -u
}

# older A B: true when semantic version A sorts before B (a prerelease or
# pseudo-version before its release, as Go orders them).
older() {
	local a=${1#v} b=${2#v} ca cb
	ca=${a%%[-+]*} cb=${b%%[-+]*}
	if [ "$ca" != "$cb" ]; then
		[ "$(printf '%s\n%s\n' "$ca" "$cb" | sort -V | head -1)" = "$ca" ]
		return
	fi
	a=${a%%+*} b=${b%%+*}
	[ "$a" = "$b" ] && return 1
	[ "$a" = "$ca" ] && return 1 # A is the release, B its prerelease
	[ "$b" = "$cb" ] && return 0
	[ "$(printf '%s\n%s\n' "$a" "$b" | sort -V | head -1)" = "$a" ]
}

# differing: "path kdefer-version wrapper-version" for each module both select, at different versions.
differing() {
	awk 'NR == FNR { m[$1] = $2; next } ($1 in m) && m[$1] != $2 { print $1, m[$1], $2 }' \
		<(modules main) <(modules wrapper)
}

case "$cmd" in
align)
	# Until nothing is behind: a raised module may bring modules into the
	# graph that kdefer also has (at other versions).
	for _ in 1 2 3 4 5; do
		ups=()
		while read -r path mine theirs; do
			[ -n "$path" ] && older "$theirs" "$mine" && ups+=("$path@$mine")
		done < <(differing)
		[ ${#ups[@]} -gt 0 ] || break
		echo "[kube-shared] requiring kdefer's versions of ${#ups[@]} modules" >&2
		(cd "$wrapper" && GOFLAGS=-mod=mod go get "${ups[@]}" 2>&1 | grep -v '^go: downloading' >&2 && GOFLAGS=-mod=mod go mod tidy)
	done
	"$0" check "$wrapper"
	;;
check)
	behind=0
	while read -r path mine theirs; do
		[ -n "$path" ] || continue
		if older "$mine" "$theirs"; then
			echo "[kube-shared] $path: Kubernetes needs $theirs, kdefer has $mine (not shared until kdefer moves)" >&2
		else
			echo "[kube-shared] $path: wrapper has $theirs, kdefer $mine: run test/tools/kube/shared.sh align $wrapper" >&2
			behind=1
		fi
	done < <(differing)
	exit "$behind"
	;;
count)
	# package@version and its dependencies, for kdefer's tests and for the
	# kube binaries and etcd; a package is reused when it and all its
	# dependencies appear in kdefer's set at the same versions.
	fmt='{{.ImportPath}}@{{with .Module}}{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}{{else}}std{{end}} {{join .Deps " "}}'
	(cd "$root" && go list -deps -test -f "$fmt" ./...) | grep -v ' \[' | grep -v '^[^ ]*\.test@' >/tmp/kube-shared-main.$$
	(cd "$wrapper" && go list -deps -f "$fmt" "${kube_pkgs[@]}") >/tmp/kube-shared-kube.$$
	awk '
	NR == FNR { split($1, a, "@"); main[$1] = 1; next }
	{
		split($1, a, "@"); key[a[1]] = $1; line[a[1]] = $0; order[++n] = a[1]
	}
	END {
		for (i = 1; i <= n; i++) {
			p = order[i]; if (key[p] ~ /@std$/) { std++; continue }
			total++
			if (!(key[p] in main)) continue
			same++
			k = split(line[p], d, " "); ok = 1
			for (j = 2; j <= k; j++) if (!(key[d[j]] in main)) { ok = 0; break }
			if (ok) reused++
		}
		printf "kube+etcd build: %d non-std packages (+%d std); at kdefer'"'"'s versions: %d; reusable from kdefer'"'"'s cache (package and all deps identical): %d\n", total, std, same, reused
	}' /tmp/kube-shared-main.$$ /tmp/kube-shared-kube.$$
	rm -f /tmp/kube-shared-main.$$ /tmp/kube-shared-kube.$$
	;;
*) echo "usage: $0 align|check|count WRAPPER_DIR" >&2; exit 2 ;;
esac
