#!/usr/bin/env bash
# A real Kubernetes cluster on this machine, one node or several, for kdefer's
# e2e tier, `make demo` and manual use. See docs/development.md, "The local cluster".
#
#   cluster.sh up [--nodes N] start (after cleaning up any previous run) and wait for N Ready nodes
#                            (default 1, or KDEFER_CLUSTER_NODES); a healthy running cluster of N
#                            nodes is kept (only changed images are imported)
#   cluster.sh down          stop everything; leaves no process, mount, netns, bridge, cgroup or chain
#   cluster.sh status        component pids and node state (exit 0 when the cluster answers)
#   cluster.sh env           shell exports (KUBECONFIG=...) for the running cluster
#   cluster.sh nodes         the running cluster's node names, one a line
#   cluster.sh deps          install the Debian packages the cluster needs (no-op when present)
#   cluster.sh load-images [FILE.tar...]   import image tarballs into every node (default: bin/images/*.tar)
#   cluster.sh recycle-pvs   wipe and free every Released local PV of the kdefer-local class
#   cluster.sh restart|stop|start COMPONENT [--node NODE]   (kubelet, containerd, kube-apiserver, ...;
#                            a node's kubelet and containerd, by default the first node's; for e2e)
#   cluster.sh stop|start|kill NODE   one node: stop its kubelet and containerd (its containers run on),
#                            boot it again, or kill it like a power loss (its pods' processes too)
#   cluster.sh logs [LINES]  the tail of every component's log (for dumping on test failure)
#   cluster.sh ctr [--node NODE] ARGS...   ctr against a node's containerd (default the first), namespace k8s.io
#
# The images are imported from KDEFER_IMAGES_DIR (default bin/images), built
# there when missing; KDEFER_CLUSTER_KDEFER_IMAGES=0 builds only pause and
# busybox (for a cluster whose kdefer images come from a registry).
#
# Everything lives under KDEFER_CLUSTER_DIR (default $REPO/bin/cluster). Only
# 127.0.0.1 and the private bridge kdefer0 (10.88.0.1/24; nodes 2..N at
# 10.88.0.2..N) are listened on. The first node is the one-node cluster; how
# the others are made is in lib/nodes.sh.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$REPO/test/cluster"
DIR=${KDEFER_CLUSTER_DIR:-$REPO/bin/cluster}
mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd)
TOOLS="$REPO/test/tools/install.sh"
IMAGES_DIR=${KDEFER_IMAGES_DIR:-$REPO/bin/images}

NODE1=${KDEFER_NODE_NAME:-kdefer-node}
MAX_NODES=8
BRIDGE=kdefer0
# Locally administered, fixed (see setup_network).
BRIDGE_MAC=02:6b:64:65:66:01
# The host on the bridge: pods reach servers on the host here; also the first node's IP.
HOST_IP=10.88.0.1
SERVICE_CIDR=10.0.0.0/24
API_PORT=6443
ETCD_CLIENT_PORT=2479
ETCD_PEER_PORT=2480
# Local PVs per node.
PV_COUNT=${KDEFER_CLUSTER_PVS:-48}
# Each node's file system (the kubelet's root dir and the local PVs) is a
# loop-mounted ext4 image of this size, sparse (the host pays only for what is
# written), so that a pod filling its work volume can drive the node into
# DiskPressure (e2e TestDiskPressure). Images and containers' writable layers
# (imagefs) and pod logs stay on the host's file system.
NODEFS_SIZE=${KDEFER_NODEFS_SIZE:-4G}
# Hard eviction thresholds: far from normal use (the e2e tier's peak use of
# the node's file system is a few hundred MiB), so the node never evicts by
# itself; tests cross them deliberately (TestDiskPressure) or trigger kubelet
# eviction with per-pod ephemeral-storage limits (always enforced). Override
# with KDEFER_EVICTION_HARD as YAML flow map, e.g. '{memory.available: "500Mi"}'.
EVICTION_HARD=${KDEFER_EVICTION_HARD:-'{memory.available: "100Mi", nodefs.available: "1Gi", nodefs.inodesFree: "2%", imagefs.available: "2%"}'}
WAIT_READY=${KDEFER_CLUSTER_TIMEOUT:-180}
# Where the pods of a namespace without the annotation
# scheduler.alpha.kubernetes.io/node-selector go: a node label selector the
# apiserver's PodNodeSelector admission plugin adds to them (empty: anywhere).
# make e2e keeps them on the first node (kubernetes.io/hostname=kdefer-node),
# so the scenarios written for one node see one, while scenarios that disrupt
# a node annotate their namespace with a node of their own (test/e2e/lanes_test.go).
# Read by up (it goes into the apiserver's admission configuration).
DEFAULT_NODE_SELECTOR=${KDEFER_CLUSTER_DEFAULT_NODE_SELECTOR:-}
# The test registry (test/registry, started by the e2e harness) that every
# node's containerd pulls from over plain HTTP; see registry_hosts.
REGISTRY=${KDEFER_REGISTRY:-$HOST_IP:5000}

# Every node's pod logs and the node agents' spools (lib/nodes.sh POD_LOGS):
# a fixed host path, since deploy/overlays/local mounts it into the agents.
HOST_LOG_DIR=/var/log/kdefer-cluster
PKI="$DIR/pki"
RUN="$DIR/run"
LOGS="$DIR/logs"
KUBECONFIG_ADMIN="$DIR/kubeconfig"
CONTROL_PLANE="etcd kube-apiserver kube-controller-manager kube-scheduler"
COMPONENTS="etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet"
DEBIAN_PACKAGES="containerd runc containernetworking-plugins busybox-static openssl iproute2 util-linux e2fsprogs"

log() { echo "[cluster $(date +%H:%M:%S)] $*" >&2; }
die() { echo "[cluster] ERROR: $*" >&2; exit 1; }

kube_dir() { "$TOOLS" path kube; }
etcd_dir() { "$TOOLS" path etcd; }
kubectl() { "$(kube_dir)/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
ctr_() { ctr -a "$CTRD_SOCK" -n k8s.io "$@"; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (it starts containerd and kubelets)"; }

for f in certs processes nodes images storage cleanup; do
	# shellcheck source=/dev/null
	source "$HERE/lib/$f.sh"
done
NODES=$(running_nodes)
node_ctx 1

# ---------------------------------------------------------------- dependencies

deps() {
	local missing=() p
	for p in $DEBIAN_PACKAGES; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	need_root
	log "installing Debian packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

binaries() {
	"$TOOLS" etcd >&2
	"$TOOLS" kube >&2
	local k e; k=$(kube_dir); e=$(etcd_dir)
	for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
		[ -x "$k/$b" ] || die "$k/$b missing (make tools)"
	done
	[ -x "$e/etcd" ] || die "$e/etcd missing (make tools)"
	for b in containerd containerd-shim-runc-v2 ctr runc; do
		command -v "$b" >/dev/null || die "$b not found (cluster.sh deps)"
	done
	for b in bridge host-local loopback; do
		[ -x "/usr/lib/cni/$b" ] || die "/usr/lib/cni/$b missing (containernetworking-plugins)"
	done
}

# ---------------------------------------------------------------- commands

# all_alive: every component of the control plane and of the running nodes runs.
all_alive() {
	local c i
	for c in $CONTROL_PLANE; do alive "$c" || return 1; done
	for ((i = 1; i <= NODES; i++)); do
		node_ctx "$i"
		alive "containerd$SFX" && alive "kubelet$SFX" || { node_ctx 1; return 1; }
	done
	node_ctx 1
}

node_names() {
	local i
	for ((i = 1; i <= NODES; i++)); do node_ctx "$i"; echo "$NODE"; done
	node_ctx 1
}

up() {
	need_root
	local t0=$SECONDS want=${KDEFER_CLUSTER_NODES:-1} i c
	while [ $# -gt 0 ]; do
		case "$1" in
		--nodes) want=${2:?--nodes N}; shift 2 ;;
		--nodes=*) want=${1#--nodes=}; shift ;;
		*) die "up: unknown argument $1 (up [--nodes N])" ;;
		esac
	done
	[[ $want =~ ^[1-9]$ ]] && ((want <= MAX_NODES)) || die "up: --nodes $want: want 1..$MAX_NODES"
	# unix socket paths (containerd, kubelet plugins) must stay under 108 bytes
	[ ${#DIR} -le 60 ] || die "KDEFER_CLUSTER_DIR=$DIR is too long for unix socket paths (max 60 characters): set a shorter one"
	deps
	binaries
	# Already up and healthy with as many nodes, on the same Kubernetes and
	# etcd (KUBE_VERSION) and default node selector: keep it (and its
	# objects); import changed images.
	if ((NODES == want)) && [ "$(cat "$DIR/binaries" 2>/dev/null)" = "$(kube_dir) $(etcd_dir) $DEFAULT_NODE_SELECTOR" ] && all_alive &&
		kubectl wait --for=condition=Ready $(node_names | sed 's#^#node/#') --timeout=5s >/dev/null 2>&1; then
		load_images
		log "cluster already up (fresh start: cluster.sh down && cluster.sh up); export KUBECONFIG=$KUBECONFIG_ADMIN"
		return 0
	fi
	if ! alive kube-apiserver && tcp_open 127.0.0.1 "$API_PORT"; then
		die "127.0.0.1:$API_PORT is in use by a program that is not this cluster's apiserver (another cluster with another KDEFER_CLUSTER_DIR? stop it first)"
	fi
	if [ -d "$RUN" ] || [ -d "$DIR/etcd" ] || has_state || ip link show "$BRIDGE" >/dev/null 2>&1; then
		log "cleaning up a previous run"
		cleanup
	fi
	NODES=$want
	# The last run's logs are kept beside the new ones for post-mortems.
	if [ -d "$LOGS" ]; then rm -rf "$LOGS.prev"; mv "$LOGS" "$LOGS.prev"; fi
	mkdir -p "$RUN" "$LOGS"
	echo "$NODES" >"$DIR/node-count"
	echo "$(kube_dir) $(etcd_dir) $DEFAULT_NODE_SELECTOR" >"$DIR/binaries"
	# Fixed paths outside the state dir that components create: removed by down when empty.
	for c in /var/lib/cni /var/log/containers /run/containerd /var/lib/kubelet; do
		[ -e "$c" ] || echo "$c" >>"$DIR/host-dirs"
	done
	ensure_images
	pki
	configs
	for ((i = 1; i <= NODES; i++)); do node_ctx "$i"; setup_nodefs; setup_cgroup_root; done
	node_ctx 1
	setup_network
	start_etcd
	for ((i = 1; i <= NODES; i++)); do node_ctx "$i"; start_containerd; done
	node_ctx 1
	load_images
	start_apiserver
	start_controller_manager
	start_scheduler
	# The kubelets start together, then each is waited for.
	for ((i = 1; i <= NODES; i++)); do node_ctx "$i"; alive "kubelet$SFX" || launch_kubelet; done
	for ((i = 1; i <= NODES; i++)); do node_ctx "$i"; wait_kubelet; done
	node_ctx 1
	storage
	for ((i = 1; i <= NODES; i++)); do
		node_ctx "$i"
		log "waiting for node $NODE to be Ready"
		wait_until "node $NODE to register" "$WAIT_READY" "kubelet$SFX" kubectl get node "$NODE"
		wait_until "node $NODE Ready" "$WAIT_READY" "kubelet$SFX" kubectl wait --for=condition=Ready "node/$NODE" --timeout=5s
	done
	node_ctx 1
	wait_until "ServiceAccount default/default" 60 kube-controller-manager kubectl get serviceaccount default -n default
	# every pod mounts the root CA from this ConfigMap (its token volume waits for it)
	wait_until "ConfigMap default/kube-root-ca.crt" 60 kube-controller-manager kubectl get configmap kube-root-ca.crt -n default
	log "cluster up in $((SECONDS - t0))s ($NODES node(s)); $(printf 'export KUBECONFIG=%s' "$KUBECONFIG_ADMIN")"
}

down() {
	need_root
	cleanup
	leftovers || die "cleanup incomplete (see above)"
	log "cluster down"
}

status() {
	local c rc=0 i
	for c in $CONTROL_PLANE; do
		if alive "$c"; then printf '%-24s running (pid %s)\n' "$c" "$(cat "$(pidfile "$c")")"
		else printf '%-24s stopped\n' "$c"; rc=1; fi
	done
	for ((i = 1; i <= NODES; i++)); do
		node_ctx "$i"
		for c in "containerd$SFX" "kubelet$SFX"; do
			if alive "$c"; then printf '%-24s running (pid %s) %s\n' "$c" "$(cat "$(pidfile "$c")")" "$NODE"
			else printf '%-24s stopped %s\n' "$c" "$NODE"; rc=1; fi
		done
	done
	node_ctx 1
	if [ -f "$KUBECONFIG_ADMIN" ] && kubectl get --raw /readyz >/dev/null 2>&1; then
		kubectl get nodes -o wide 2>/dev/null || true
	else
		echo "apiserver not answering"; rc=1
	fi
	return $rc
}

env_() {
	cat <<EOF2
export KUBECONFIG=$KUBECONFIG_ADMIN
export KDEFER_CLUSTER_DIR=$DIR
export KDEFER_NODE_NAME=$NODE1
export KDEFER_NODE_IP=$HOST_IP
export KDEFER_CONTAINERD_SOCK=$CTRD_SOCK
export KDEFER_REGISTRY=$REGISTRY
export KDEFER_KUBECTL=$(kube_dir)/kubectl
EOF2
	((NODES == 1)) || echo "export KDEFER_NODES='$(node_names | tr '\n' ' ' | sed 's/ $//')'"
	local f n
	for f in "$IMAGES_DIR"/*.ref; do
		[ -f "$f" ] || continue
		n=$(basename "$f" .ref); n=$(echo "$n" | tr 'a-z-' 'A-Z_')
		echo "export KDEFER_IMAGE_$n=$(cat "$f")"
	done
}

logs() {
	local n=${1:-60} f
	for f in "$LOGS"/*.log; do
		[ -f "$f" ] || continue
		echo "===== $f (last $n lines)"
		tail -n "$n" "$f"
	done
}

# node_or_component VERB NAME [--node NODE] [GRACE]: stop/start/restart/kill a
# node by name, or a component (a node's kubelet or containerd with --node).
node_or_component() {
	local verb=$1 name=${2:?component or node} i
	need_root
	if i=$(node_index "$name"); then
		((i <= NODES)) || die "node $name is not part of the running cluster ($NODES node(s))"
		case "$verb" in
		stop) node_stop "$i" ;; start) node_start "$i" ;; kill) node_kill "$i" ;;
		restart) node_stop "$i"; node_start "$i" ;;
		esac
		return
	fi
	shift 2
	node_ctx 1
	if [ "${1:-}" = --node ]; then
		case "$name" in kubelet | containerd) ;; *) die "--node: only a node's kubelet or containerd, not $name" ;; esac
		i=$(node_index "${2:?--node NODE}") && ((i <= NODES)) || die "--node $2: not a node of the running cluster ($(node_names | tr '\n' ' '))"
		node_ctx "$i"
		shift 2
	fi
	case "$verb" in
	stop) stop_proc "$name$SFX" "${1:-10}" ;;
	start) start_component "$name" ;;
	restart) stop_proc "$name$SFX" "${1:-10}"; start_component "$name" ;;
	kill) die "kill takes a node name ($(node_names | tr '\n' ' '))" ;;
	esac
	node_ctx 1
}

ctr_node() {
	if [ "${1:-}" = --node ]; then
		node_ctx "$(node_index "${2:?--node NODE}")" || die "no node ${2}"
		shift 2
	fi
	ctr_ "$@"
}

cmd=${1:-}
shift || true
# One command at a time changes a cluster (e.g. make e2e and a manual down).
case "$cmd" in
up | down | start | stop | restart | kill | load-images | recycle-pvs)
	exec 9>"$DIR/.lock"
	flock -w 600 9 || die "another cluster.sh holds $DIR/.lock"
	;;
esac
case "$cmd" in
up) up "$@" ;;
down) down ;;
status) status ;;
env) env_ ;;
nodes) node_names ;;
deps) deps ;;
load-images) need_root; load_images "$@" ;;
recycle-pvs) recycle_pvs ;;
stop | start | restart | kill) node_or_component "$cmd" "$@" ;;
logs) logs "$@" ;;
ctr) ctr_node "$@" ;;
_) "$@" ;; # internal: run one function (debugging)
*) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
