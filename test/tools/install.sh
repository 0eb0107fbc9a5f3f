#!/usr/bin/env bash
# Builds the external tools that kdefer's tests, benchmarks and local cluster
# need, from the Go module proxy only, and caches them by version in
# $KDEFER_TOOLS_DIR (default ~/.cache/kdefer/tools, shared by every clone on
# the machine, so CI's fresh clone reuses them). A tool whose cached binary
# exists is not rebuilt.
#
#   test/tools/install.sh kube|etcd|minio|mc|s5cmd|all
#   test/tools/install.sh path NAME   # prints the directory holding NAME
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
tools="${KDEFER_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kdefer/tools}"

KUBE_VERSION=v1.34.4
# etcd is built from the Kubernetes wrapper module, at the release Kubernetes
# itself requires (its go.mod is the one source of the version): the two
# share grpc, protobuf, OpenTelemetry and Prometheus at the same versions, so
# etcd costs ~40 CPU-seconds on top of Kubernetes instead of ~200 alone.
ETCD_VERSION=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2 }' "$root/test/tools/kube/go.mod")
# MinIO has no semver tags; @latest resolves to a moving master pseudo-version.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
MC_VERSION=v0.0.0-20250313080218-cf909e1063a9
S5CMD_VERSION=v2.3.0

dir_of() {
	case "$1" in
	kube) echo "$tools/kube-$KUBE_VERSION" ;;
	etcd) echo "$tools/etcd-$ETCD_VERSION" ;;
	minio) echo "$tools/minio-$MINIO_VERSION" ;;
	mc) echo "$tools/mc-$MC_VERSION" ;;
	s5cmd) echo "$tools/s5cmd-$S5CMD_VERSION" ;;
	*) echo "unknown tool $1" >&2; return 2 ;;
	esac
}

log() { echo "[tools] $*" >&2; }

# The compiler spends part of its time collecting garbage; with memory to
# spare (the builds run 2 compiles at once, well under 24 GiB), a higher
# GOGC trades memory for CPU: etcd's cold build took 203 CPU-s at GOGC=400
# against 228 at the default (measured once, on a loaded machine). Only the
# tool builds get it: the project's own tests measure memory and must run
# with the default.
export GOGC=400

# timed NAME CMD...: runs CMD and logs its wall and CPU seconds (the tier
# budget in the README is built from these lines).
timed() {
	local TIMEFORMAT="[tools] built $1: %R s wall, %U s user, %S s sys"
	shift
	time "$@"
}

# done_or_build NAME FILE...: true when every FILE exists in NAME's directory.
have() {
	local d; d=$(dir_of "$1"); shift
	for f in "$@"; do [ -x "$d/$f" ] || return 1; done
}

build_kube() {
	have kube kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl && return 0
	local d v=${KUBE_VERSION#v}; d=$(dir_of kube)
	local minor=${v#*.}; minor=${minor%%.*}
	local ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld="$ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	log "building kubernetes $KUBE_VERSION (cold: ~20 CPU-minutes)"
	mkdir -p "$d.tmp"
	(cd "$root/test/tools/kube" && timed "kubernetes $KUBE_VERSION" env CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$d.tmp/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl)
	rm -rf "$d"; mv "$d.tmp" "$d"
}

build_etcd() {
	have etcd etcd && return 0
	local d; d=$(dir_of etcd)
	log "building etcd $ETCD_VERSION"
	mkdir -p "$d.tmp"
	(cd "$root/test/tools/kube" && timed "etcd $ETCD_VERSION" env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$d.tmp/etcd" go.etcd.io/etcd/server/v3)
	rm -rf "$d"; mv "$d.tmp" "$d"
}

gobin_install() { # NAME PKG@VERSION
	local d; d=$(dir_of "$1")
	log "building $2"
	mkdir -p "$d.tmp"
	timed "$2" env CGO_ENABLED=0 GOBIN="$d.tmp" GOFLAGS=-buildvcs=false go install -trimpath -ldflags "-s -w" "$2"
	rm -rf "$d"; mv "$d.tmp" "$d"
}

build_minio() { have minio minio || gobin_install minio "github.com/minio/minio@$MINIO_VERSION"; }
build_mc() { have mc mc || gobin_install mc "github.com/minio/mc@$MC_VERSION"; }

build_s5cmd() {
	have s5cmd s5cmd && return 0
	# The module proxy refuses s5cmd's version list, so `go install @v2.3.0`
	# fails; download the exact module and build it in a writable copy.
	local d src tmp; d=$(dir_of s5cmd)
	log "building s5cmd $S5CMD_VERSION"
	src=$(go mod download -json "github.com/peak/s5cmd/v2@$S5CMD_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
	tmp=$(mktemp -d); cp -r "$src/." "$tmp/"; chmod -R u+w "$tmp"
	mkdir -p "$d.tmp"
	(cd "$tmp" && timed "s5cmd $S5CMD_VERSION" env CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" -o "$d.tmp/s5cmd" .)
	rm -rf "$tmp" "$d"; mv "$d.tmp" "$d"
}

case "${1:-}" in
kube | etcd | minio | mc | s5cmd) "build_$1" ;;
all) build_etcd; build_kube; build_minio; build_mc; build_s5cmd ;;
path) dir_of "$2" ;;
*) echo "usage: $0 kube|etcd|minio|mc|s5cmd|all|path NAME" >&2; exit 2 ;;
esac
