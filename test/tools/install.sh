#!/usr/bin/env bash
# Builds the external tools that kdefer's tests, benchmarks and local cluster
# need, from the Go module proxy (Azurite from the npm registry: it exists
# only as a Node.js package), and caches them by version in
# $KDEFER_TOOLS_DIR (default ~/.cache/kdefer/tools, shared by every clone on
# the machine, so CI's fresh clone reuses them). A tool whose cached binary
# exists is not rebuilt.
#
#   test/tools/install.sh kube|kube-e2e|etcd|minio|mc|s5cmd|azurite|kueue|jobset|all
#   test/tools/install.sh path NAME   # prints the directory holding NAME
#   test/tools/install.sh oldest      # prints the oldest supported Kubernetes release
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
tools="${KDEFER_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kdefer/tools}"

# The Kubernetes release the cluster, envtest and e2e run: the newest the
# module proxy serves by default; KUBE_VERSION=v1.34.4 (any release the proxy
# serves) for another. Each minor release has a committed wrapper module
# (test/tools/kube/v1.MINOR, written by test/tools/kube/gen.sh); another
# patch release is generated into the tools cache, once.
KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
# The oldest release kdefer supports (docs/usage.md "Supported Kubernetes
# versions"), which every `make test` runs a smoke subset of the e2e tier on
# (make e2e-oldest): the release of the oldest committed wrapper module, so
# that raising the floor is removing a wrapper (hack/doccheck checks that the
# docs and the chart state the same range).
kube_oldest() {
	local w
	w=$(ls -d "$root"/test/tools/kube/v1.* | sort -V | head -1)
	awk '$1 == "k8s.io/kubernetes" { print $2 }' "$w/go.mod"
}
[[ $KUBE_VERSION =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || { echo "[tools] KUBE_VERSION=$KUBE_VERSION is not v1.MINOR.PATCH" >&2; exit 2; }
KUBE_MINOR=${BASH_REMATCH[1]}

# kube_wrapper: the directory of the wrapper module for KUBE_VERSION.
kube_wrapper() {
	local d="$root/test/tools/kube/v1.$KUBE_MINOR"
	if awk -v v="$KUBE_VERSION" '$1 == "k8s.io/kubernetes" && $2 == v { f = 1 } END { exit !f }' "$d/go.mod" 2>/dev/null; then
		echo "$d"; return
	fi
	d="$tools/wrappers/kube-$KUBE_VERSION"
	[ -s "$d/go.sum" ] || "$root/test/tools/kube/gen.sh" "$KUBE_VERSION" "$d" >&2
	echo "$d"
}

# etcd is built from the Kubernetes wrapper module, at the release Kubernetes
# itself requires (its go.mod is the one source of the version): the two
# share grpc, protobuf, OpenTelemetry and Prometheus at the same versions, so
# etcd costs ~40 CPU-seconds on top of Kubernetes instead of ~200 alone.
etcd_version() { awk '$1 == "go.etcd.io/etcd/server/v3" { print $2 }' "$(kube_wrapper)/go.mod"; }
# MinIO has no semver tags; @latest resolves to a moving master pseudo-version.
# It is built from the wrapper module test/tools/minio, whose go.mod pins it
# and holds every module MinIO shares with kdefer at kdefer's version, so a
# cold build reuses ~690 of its ~1140 packages from kdefer's own build. The
# cache key adds the wrapper's go.sum digest: a re-alignment rebuilds it.
MINIO_VERSION=$(awk '{ for (i = 1; i < NF; i++) if ($i == "github.com/minio/minio") print $(i + 1) }' "$root/test/tools/minio/go.mod")
MINIO_KEY=$MINIO_VERSION-$(sha256sum "$root/test/tools/minio/go.sum" | cut -c1-8)
MC_VERSION=v0.0.0-20250313080218-cf909e1063a9
S5CMD_VERSION=v2.3.0
# Azurite, Microsoft's Azure Storage emulator, for azblob:// (Node.js >= 18).
AZURITE_VERSION=3.37.0
# Kueue's manager for the e2e Kueue scenarios, at the version
# test/tools/kueue/go.mod requires (its one source).
KUEUE_VERSION=$(awk '$1 == "sigs.k8s.io/kueue" { print $2 }' "$root/test/tools/kueue/go.mod")
# JobSet's manager for the e2e JobSet scenario, at the version
# test/tools/jobset/go.mod requires (its one source).
JOBSET_VERSION=$(awk '$1 == "sigs.k8s.io/jobset" { print $2 }' "$root/test/tools/jobset/go.mod")

dir_of() {
	case "$1" in
	kube) echo "$tools/kube-$KUBE_VERSION" ;;
	kube-e2e) echo "$tools/kube-e2e-$KUBE_VERSION-$(kube_e2e_key)" ;;
	etcd) echo "$tools/etcd-$(etcd_version)" ;;
	minio) echo "$tools/minio-$MINIO_KEY" ;;
	mc) echo "$tools/mc-$MC_VERSION" ;;
	s5cmd) echo "$tools/s5cmd-$S5CMD_VERSION" ;;
	azurite) echo "$tools/azurite-$AZURITE_VERSION" ;;
	kueue) echo "$tools/kueue-$KUEUE_VERSION" ;;
	jobset) echo "$tools/jobset-$JOBSET_VERSION" ;;
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

# The compiler flags of kdefer's own builds (the Makefile's GOFLAGS): the
# build cache is keyed by them, so the tool builds reuse the packages that
# kdefer's tests compiled (and the other way round) only with the same ones.
# No DWARF: the binaries are linked with -w, which drops it anyway, and
# writing it is 8-25% of the compiler's CPU (the Makefile says more).
GCFLAGS=-gcflags=all=-dwarf=false

# timed NAME CMD...: runs CMD and logs its wall and CPU seconds (the tier
# budget in docs/development.md is built from these lines).
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
	local d w; d=$(dir_of kube); w=$(kube_wrapper)
	local ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld="$ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$KUBE_MINOR -X $p.gitTreeState=clean"
	done
	log "building kubernetes $KUBE_VERSION from $w (cold: ~20 CPU-minutes)"
	mkdir -p "$d.tmp"
	(cd "$w" && timed "kubernetes $KUBE_VERSION" env CGO_ENABLED=0 go build -trimpath "$GCFLAGS" -ldflags "$ld" -o "$d.tmp/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl)
	rm -rf "$d"; mv "$d.tmp" "$d"
}

# Kubernetes' own end-to-end specs of the apps SIG (make e2e-upstream runs
# its Job, CronJob and TTLAfterFinished specs): e2e.test, the small test
# main test/tools/kube/e2e/e2e_test.go compiled in a copy of the release's
# wrapper module (its go.sum gains the specs' few extra modules there), and
# the Ginkgo CLI at the version the release requires, which runs the specs
# in parallel processes. Only test/e2e/apps and the framework are compiled
# (~2,100 packages, most of them the kube binaries' too), not upstream's
# whole test/e2e. The cache key adds the test main's digest: editing it
# rebuilds.
kube_e2e_key() { sha256sum "$root/test/tools/kube/e2e/e2e_test.go" | cut -c1-8; }
build_kube_e2e() {
	have kube-e2e e2e.test ginkgo && return 0
	local d w ld; d=$(dir_of kube-e2e); w=$(kube_wrapper)
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld="$ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$KUBE_MINOR -X $p.gitTreeState=clean"
	done
	log "building Kubernetes $KUBE_VERSION's e2e specs of test/e2e/apps and the Ginkgo CLI"
	rm -rf "$d.tmp"; mkdir -p "$d.tmp/src"
	cp "$w/go.mod" "$w/go.sum" "$root/test/tools/kube/e2e/e2e_test.go" "$d.tmp/src/"
	(cd "$d.tmp/src" && timed "kubernetes $KUBE_VERSION e2e.test" env CGO_ENABLED=0 GOFLAGS=-mod=mod \
		go test -c -tags kubee2e -trimpath "$GCFLAGS" -ldflags "$ld" -o "$d.tmp/e2e.test" . &&
		timed "ginkgo CLI" env CGO_ENABLED=0 GOFLAGS=-mod=mod \
			go build -trimpath "$GCFLAGS" -ldflags "-s -w" -o "$d.tmp/ginkgo" github.com/onsi/ginkgo/v2/ginkgo)
	rm -rf "$d"; mv "$d.tmp" "$d"
}

build_etcd() {
	have etcd etcd && return 0
	local d; d=$(dir_of etcd)
	local v w; v=$(etcd_version); w=$(kube_wrapper)
	log "building etcd $v"
	mkdir -p "$d.tmp"
	(cd "$w" && timed "etcd $v" env CGO_ENABLED=0 go build -trimpath "$GCFLAGS" -ldflags "-s -w" -o "$d.tmp/etcd" go.etcd.io/etcd/server/v3)
	rm -rf "$d"; mv "$d.tmp" "$d"
}

gobin_install() { # NAME PKG@VERSION
	local d; d=$(dir_of "$1")
	log "building $2"
	mkdir -p "$d.tmp"
	timed "$2" env CGO_ENABLED=0 GOBIN="$d.tmp" GOFLAGS=-buildvcs=false go install -trimpath "$GCFLAGS" -ldflags "-s -w" "$2"
	rm -rf "$d"; mv "$d.tmp" "$d"
}

build_minio() {
	have minio minio && return 0
	local d; d=$(dir_of minio)
	log "building MinIO $MINIO_VERSION from test/tools/minio"
	mkdir -p "$d.tmp"
	(cd "$root/test/tools/minio" && timed "github.com/minio/minio@$MINIO_VERSION" env CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
		go build -trimpath "$GCFLAGS" -ldflags "-s -w" -o "$d.tmp/minio" github.com/minio/minio)
	rm -rf "$d"; mv "$d.tmp" "$d"
}
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
	(cd "$tmp" && timed "s5cmd $S5CMD_VERSION" env CGO_ENABLED=0 go build -mod=mod -trimpath "$GCFLAGS" -ldflags "-s -w" -o "$d.tmp/s5cmd" .)
	rm -rf "$tmp" "$d"; mv "$d.tmp" "$d"
}

# Azurite installs with npm, exactly the version asked for, its own
# dependencies pinned by its published lock (npm ci needs the project's lock,
# so install --no-save into an empty prefix). Nothing is compiled: the cost
# is the download (~1 min cold). The blob service alone is what the tests run
# (azurite-blob), started per test package on a random port.
build_azurite() {
	have azurite azurite-blob && return 0
	local d; d=$(dir_of azurite)
	command -v npm >/dev/null || { log "azurite needs Node.js and npm (apt-get install nodejs npm)"; return 1; }
	log "installing azurite $AZURITE_VERSION from npm"
	rm -rf "$d.tmp"; mkdir -p "$d.tmp"
	(cd "$d.tmp" && timed "azurite $AZURITE_VERSION" npm install --no-save --no-audit --no-fund --omit=dev --loglevel=error \
		--prefix "$d.tmp" "azurite@$AZURITE_VERSION")
	# The tests run one stable path: a wrapper that finds its package
	# wherever the directory ends up.
	cat >"$d.tmp/azurite-blob" <<'WRAP'
#!/bin/sh
exec "$(dirname "$(readlink -f "$0")")/node_modules/.bin/azurite-blob" "$@"
WRAP
	chmod +x "$d.tmp/azurite-blob"
	rm -rf "$d"; mv "$d.tmp" "$d"
}

# A controller-runtime manager of another project (Kueue, JobSet), built in
# its wrapper module test/tools/NAME (whose shared dependencies are set so
# that a cold build compiles only what kdefer's or Kueue's did not), and
# next to it the module's config/components, which the e2e harness renders
# with kustomize (test/e2e/*_install_test.go): binary and manifests of one
# version, from one download.
#   build_manager NAME VERSION MODULE PACKAGE
build_manager() {
	local name=$1 version=$2 module=$3 pkg=$4 d src
	have "$name" "$name" && [ -d "$(dir_of "$name")/config/components" ] && return 0
	d=$(dir_of "$name")
	log "building $name $version"
	rm -rf "$d.tmp"; mkdir -p "$d.tmp"
	(cd "$root/test/tools/$name" && timed "$name $version" env CGO_ENABLED=0 go build -trimpath "$GCFLAGS" -ldflags "-s -w" -o "$d.tmp/$name" "$pkg")
	src=$(cd "$root/test/tools/$name" && go list -m -f '{{.Dir}}' "$module")
	mkdir -p "$d.tmp/config"
	cp -r "$src/config/components" "$d.tmp/config/"
	chmod -R u+w "$d.tmp/config"
	rm -rf "$d"; mv "$d.tmp" "$d"
}
build_kueue() { build_manager kueue "$KUEUE_VERSION" sigs.k8s.io/kueue sigs.k8s.io/kueue/cmd/kueue; }
build_jobset() { build_manager jobset "$JOBSET_VERSION" sigs.k8s.io/jobset sigs.k8s.io/jobset; }

case "${1:-}" in
kube | etcd | minio | mc | s5cmd | azurite | kueue | jobset) "build_$1" ;;
kube-e2e) build_kube_e2e ;;
all) build_etcd; build_kube; build_minio; build_mc; build_s5cmd; build_azurite; build_kueue; build_jobset ;;
path) dir_of "$2" ;;
oldest) kube_oldest ;;
*) echo "usage: $0 kube|kube-e2e|etcd|minio|mc|s5cmd|azurite|kueue|jobset|all|path NAME|oldest" >&2; exit 2 ;;
esac
