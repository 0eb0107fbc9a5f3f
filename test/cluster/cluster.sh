#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for kdefer's e2e tier,
# `make demo` and manual use. See docs/development.md, "The local cluster".
#
#   cluster.sh up            start (after cleaning up any previous run) and wait for a Ready node;
#                            a healthy running cluster is kept (only changed images are imported)
#   cluster.sh down          stop everything; leaves no process, mount, netns, bridge, cgroup or chain
#   cluster.sh status        component pids and node state (exit 0 when the cluster answers)
#   cluster.sh env           shell exports (KUBECONFIG=...) for the running cluster
#   cluster.sh deps          install the Debian packages the cluster needs (no-op when present)
#   cluster.sh load-images [FILE.tar...]   import image tarballs (default: bin/images/*.tar)
#   cluster.sh recycle-pvs   wipe and free every Released local PV of the kdefer-local class
#   cluster.sh restart|stop|start COMPONENT   (kubelet, containerd, kube-apiserver, ...; for e2e)
#   cluster.sh logs [LINES]  the tail of every component's log (for dumping on test failure)
#   cluster.sh ctr ARGS...   ctr against the cluster's containerd, namespace k8s.io
#
# Everything lives under KDEFER_CLUSTER_DIR (default $REPO/bin/cluster). Only
# 127.0.0.1 and the private bridge kdefer0 (10.88.0.1/24) are listened on.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$REPO/test/cluster"
DIR=${KDEFER_CLUSTER_DIR:-$REPO/bin/cluster}
mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd)
TOOLS="$REPO/test/tools/install.sh"
IMAGES_DIR=${KDEFER_IMAGES_DIR:-$REPO/bin/images}

NODE=${KDEFER_NODE_NAME:-kdefer-node}
BRIDGE=kdefer0
# Locally administered, fixed (see setup_network).
BRIDGE_MAC=02:6b:64:65:66:01
POD_SUBNET=10.88.0.0/24
NODE_IP=10.88.0.1
SERVICE_CIDR=10.0.0.0/24
CNI_NETWORK=kdefer-pods
API_PORT=6443
ETCD_CLIENT_PORT=2479
ETCD_PEER_PORT=2480
PV_COUNT=${KDEFER_CLUSTER_PVS:-48}
# The node's file system (the kubelet's root dir and the local PVs) is a
# loop-mounted ext4 image of this size, sparse (the host pays only for what is
# written), so that a pod filling its work volume can drive the node into
# DiskPressure (e2e TestDiskPressure). Images and containers' writable layers
# (imagefs) and pod logs stay on the host's file system.
NODEFS_SIZE=${KDEFER_NODEFS_SIZE:-4G}
NODEFS_IMG="$DIR/nodefs.img"
NODEFS="$DIR/nodefs"
# Hard eviction thresholds: far from normal use (the e2e tier's peak use of
# the node's file system is a few hundred MiB), so the node never evicts by
# itself; tests cross them deliberately (TestDiskPressure) or trigger kubelet
# eviction with per-pod ephemeral-storage limits (always enforced). Override
# with KDEFER_EVICTION_HARD as YAML flow map, e.g. '{memory.available: "500Mi"}'.
EVICTION_HARD=${KDEFER_EVICTION_HARD:-'{memory.available: "100Mi", nodefs.available: "1Gi", nodefs.inodesFree: "2%", imagefs.available: "2%"}'}
WAIT_READY=${KDEFER_CLUSTER_TIMEOUT:-180}
# The test registry (test/registry, started by the e2e harness) that
# containerd pulls from over plain HTTP; see registry_hosts.
REGISTRY=${KDEFER_REGISTRY:-$NODE_IP:5000}

PKI="$DIR/pki"
RUN="$DIR/run"
LOGS="$DIR/logs"
CTRD_SOCK="$RUN/containerd.sock"
KUBECONFIG_ADMIN="$DIR/kubeconfig"
COMPONENTS="etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet"
DEBIAN_PACKAGES="containerd runc containernetworking-plugins busybox-static openssl iproute2 util-linux e2fsprogs"

log() { echo "[cluster $(date +%H:%M:%S)] $*" >&2; }
die() { echo "[cluster] ERROR: $*" >&2; exit 1; }

kube_dir() { "$TOOLS" path kube; }
etcd_dir() { "$TOOLS" path etcd; }
kubectl() { "$(kube_dir)/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
ctr_() { ctr -a "$CTRD_SOCK" -n k8s.io "$@"; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (it starts containerd and a kubelet)"; }

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

# ---------------------------------------------------------------- certificates

# cert NAME CN O SANS(ext value or "") [CA]: an EC P-256 key and a certificate signed by CA (default ca).
cert() {
	local name=$1 cn=$2 o=$3 sans=$4 ca=${5:-ca} subj ext
	[ -s "$PKI/$name.crt" ] && return 0
	subj="/CN=$cn"; [ -n "$o" ] && subj="/O=$o$subj"
	openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
	ext="$PKI/$name.ext"
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [ -n "$sans" ]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$sans"
		else echo "extendedKeyUsage=clientAuth"; fi
	} >"$ext"
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$ext"
}

ca() {
	local name=$1 cn=$2
	[ -s "$PKI/$name.crt" ] && return 0
	openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
	openssl req -x509 -new -key "$PKI/$name.key" -subj "/CN=$cn" -days 3650 -sha256 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		-out "$PKI/$name.crt" 2>/dev/null
}

pki() {
	mkdir -p "$PKI"; chmod 700 "$PKI"
	# A node-name change invalidates the node certificates.
	if [ -s "$PKI/node-name" ] && [ "$(cat "$PKI/node-name")" != "$NODE" ]; then rm -f "$PKI"/kubelet*; fi
	echo "$NODE" >"$PKI/node-name"
	ca ca kdefer-cluster-ca
	ca front-proxy-ca kdefer-front-proxy-ca
	cert apiserver kube-apiserver "" \
		"IP:127.0.0.1,IP:10.0.0.1,IP:$NODE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ""
	cert admin kubernetes-admin system:masters ""
	cert controller-manager system:kube-controller-manager "" ""
	cert scheduler system:kube-scheduler "" ""
	cert kubelet-client "system:node:$NODE" system:nodes ""
	cert kubelet-serving "$NODE" "" "IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE"
	cert front-proxy-client front-proxy-client "" "" front-proxy-ca
	if [ ! -s "$PKI/sa.key" ]; then
		openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
		openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	fi
}

kubeconfig() { # FILE CERTNAME
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kdefer
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: kdefer
  context: {cluster: kdefer, user: $2, namespace: default}
current-context: kdefer
EOF
	chmod 600 "$1"
}

render() { # TEMPLATE OUT: substitutes @VAR@ placeholders
	sed -e "s#@DIR@#$DIR#g" -e "s#@PKI@#$PKI#g" -e "s#@RUN@#$RUN#g" -e "s#@NODE@#$NODE#g" \
		-e "s#@NODE_IP@#$NODE_IP#g" -e "s#@POD_SUBNET@#$POD_SUBNET#g" -e "s#@BRIDGE@#$BRIDGE#g" \
		-e "s#@CNI_NETWORK@#$CNI_NETWORK#g" -e "s#@PAUSE_IMAGE@#$PAUSE_IMAGE#g" \
		-e "s#@EVICTION_HARD@#$EVICTION_HARD#g" -e "s#@CTRD_SOCK@#$CTRD_SOCK#g" \
		"$HERE/$1" >"$2"
}

configs() {
	mkdir -p "$DIR/conf" "$DIR/cni/net.d" "$RUN" "$LOGS"
	kubeconfig "$KUBECONFIG_ADMIN" admin
	kubeconfig "$DIR/conf/controller-manager.kubeconfig" controller-manager
	kubeconfig "$DIR/conf/scheduler.kubeconfig" scheduler
	kubeconfig "$DIR/conf/kubelet.kubeconfig" kubelet-client
	render containerd.toml "$DIR/conf/containerd.toml"
	render kubelet.yaml "$DIR/conf/kubelet.yaml"
	render cni.conflist "$DIR/cni/net.d/10-$CNI_NETWORK.conflist"
	registry_hosts
}

# registry_hosts: containerd's hosts.toml for the test registry (config_path
# in containerd.toml): plain HTTP, pull only. Every other registry stays
# unreachable (containerd's proxy is a closed port, see start_containerd).
registry_hosts() {
	local d="$DIR/conf/certs.d/$REGISTRY"
	rm -rf "$DIR/conf/certs.d"
	mkdir -p "$d"
	cat >"$d/hosts.toml" <<EOF
server = "http://$REGISTRY"

[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF
}

# ---------------------------------------------------------------- node file system

# setup_nodefs: a fresh ext4 image loop-mounted at $NODEFS, and the kubelet's
# root dir and the PV directories bind-mounted from it at their usual paths
# (the same device: the kubelet's nodefs signal counts what pods write into
# their local PVs). -m 0: no blocks reserved for root, so df and the kubelet
# agree on what is available; no journal and one inode per 64 KiB: test data
# on a file system made anew by every up, ~16 MiB written to make it. The
# mount's autoclear loop device goes with its last unmount (cleanup).
setup_nodefs() {
	local d
	mountpoint -q "$NODEFS" && die "$NODEFS is still mounted (cluster.sh down first)"
	rm -f "$NODEFS_IMG"
	truncate -s "$NODEFS_SIZE" "$NODEFS_IMG"
	mkfs.ext4 -q -F -m 0 -O ^has_journal -i 65536 -E lazy_itable_init=0,nodiscard -L kdefer-nodefs "$NODEFS_IMG"
	mkdir -p "$NODEFS"
	mount -o loop "$NODEFS_IMG" "$NODEFS"
	for d in kubelet pv; do
		mkdir -p "$NODEFS/$d" "$DIR/$d"
		mount --bind "$NODEFS/$d" "$DIR/$d"
	done
}

# ---------------------------------------------------------------- processes

pidfile() { echo "$RUN/$1.pid"; }

# alive NAME: the recorded pid runs the component's binary.
alive() {
	local f p; f=$(pidfile "$1"); [ -s "$f" ] || return 1
	p=$(cat "$f"); [ -r "/proc/$p/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- "$1" || return 1
	grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null && return 1
	return 0
}

# launch NAME ARGV...: starts a component in its own session, output to logs/NAME.log.
# Proxy variables are dropped (the apiserver would send webhook calls through
# them); a proxy on a closed loopback port makes any accidental image pull fail
# at once instead of leaving the machine.
launch() {
	local name=$1; shift
	echo "=== $(date -Is) start: $*" >>"$LOGS/$name.log"
	env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u no_proxy -u NO_PROXY -u ALL_PROXY -u all_proxy \
		${LAUNCH_ENV:-} setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
	local pid=$! i
	echo "$pid" >"$(pidfile "$name")"
	# until the forked shell has exec'ed the program, its command line is ours
	for ((i = 0; i < 50; i++)); do
		tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$name" && break
		[ -d "/proc/$pid" ] || break
		sleep 0.02
	done
}

# stop_proc NAME [GRACE]: TERM, wait up to GRACE seconds, then KILL.
stop_proc() {
	local name=$1 grace=${2:-10} p i
	alive "$name" || { rm -f "$(pidfile "$name")"; return 0; }
	p=$(cat "$(pidfile "$name")")
	kill -TERM "$p" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do alive "$name" || break; sleep 0.1; done
	if alive "$name"; then log "$name ($p) ignored TERM for ${grace}s: KILL"; kill -KILL "$p" 2>/dev/null || true; sleep 0.2; fi
	rm -f "$(pidfile "$name")"
}

# wait_until DESC TIMEOUT LOGNAME CMD...: polls CMD every 0.25 s; on timeout names the log to read.
wait_until() {
	local desc=$1 timeout=$2 lg=$3 start=$SECONDS; shift 3
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS - start >= timeout)); then
			echo "[cluster] ERROR: timed out after ${timeout}s waiting for $desc" >&2
			[ -n "$lg" ] && [ -f "$LOGS/$lg.log" ] && { echo "--- last lines of $LOGS/$lg.log:" >&2; tail -n 25 "$LOGS/$lg.log" >&2; }
			return 1
		fi
		[ -n "$lg" ] && [ "$lg" != - ] && ! alive "$lg" && { echo "[cluster] ERROR: $lg exited while waiting for $desc; last lines of $LOGS/$lg.log:" >&2; tail -n 25 "$LOGS/$lg.log" >&2; return 1; }
		sleep 0.25
	done
}

tcp_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

start_etcd() {
	alive etcd && return 0
	mkdir -p "$DIR/etcd"; chmod 700 "$DIR/etcd"
	launch etcd "$(etcd_dir)/etcd" --name kdefer --data-dir "$DIR/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "kdefer=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
	wait_until "etcd on 127.0.0.1:$ETCD_CLIENT_PORT" 30 etcd tcp_open 127.0.0.1 "$ETCD_CLIENT_PORT"
}

start_containerd() {
	alive containerd && return 0
	mkdir -p "$DIR/containerd/root" "$DIR/containerd/state" "$DIR/containerd/opt"
	LAUNCH_ENV="HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 NO_PROXY=${REGISTRY%:*}" \
		launch containerd containerd --config "$DIR/conf/containerd.toml"
	wait_until "containerd on $CTRD_SOCK" 30 containerd ctr -a "$CTRD_SOCK" version
}

start_apiserver() {
	alive kube-apiserver && return 0
	launch kube-apiserver "$(kube_dir)/kube-apiserver" \
		--etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$API_PORT \
		--endpoint-reconciler-type=none \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--client-ca-file="$PKI/ca.crt" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--allow-privileged=true \
		--service-cluster-ip-range=$SERVICE_CIDR \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP \
		--requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
		--requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
		--requestheader-extra-headers-prefix=X-Remote-Extra- \
		--proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
		--enable-aggregator-routing=true \
		--profiling=false --v=1
	wait_until "kube-apiserver /readyz on 127.0.0.1:$API_PORT" 90 kube-apiserver kubectl get --raw /readyz
}

start_controller_manager() {
	alive kube-controller-manager && return 0
	local kc="$DIR/conf/controller-manager.kubeconfig"
	launch kube-controller-manager "$(kube_dir)/kube-controller-manager" \
		--kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
		--bind-address=127.0.0.1 --leader-elect=false \
		--use-service-account-credentials=true --controllers='*' \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
		--profiling=false --v=1
}

start_scheduler() {
	alive kube-scheduler && return 0
	local kc="$DIR/conf/scheduler.kubeconfig"
	launch kube-scheduler "$(kube_dir)/kube-scheduler" \
		--kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false --v=1
}

start_kubelet() {
	alive kubelet && return 0
	mkdir -p "$DIR/kubelet" "$DIR/pod-logs"
	launch kubelet "$(kube_dir)/kubelet" \
		--config="$DIR/conf/kubelet.yaml" --kubeconfig="$DIR/conf/kubelet.kubeconfig" \
		--hostname-override="$NODE" --node-ip="$NODE_IP" \
		--root-dir="$DIR/kubelet" --cert-dir="$DIR/kubelet/pki" --v=2
	wait_until "kubelet healthz on 127.0.0.1:10248" 60 kubelet tcp_open 127.0.0.1 10248
}

start_component() {
	case "$1" in
	etcd) start_etcd ;; containerd) start_containerd ;; kube-apiserver) start_apiserver ;;
	kube-controller-manager) start_controller_manager ;; kube-scheduler) start_scheduler ;; kubelet) start_kubelet ;;
	*) die "unknown component $1 (one of: $COMPONENTS)" ;;
	esac
}

# ---------------------------------------------------------------- network

setup_network() {
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge
	fi
	# A fixed MAC: a bridge without one takes the lowest MAC of its ports and
	# changes it whenever a pod's veth comes or goes, and pods that cached the
	# gateway's old MAC lose it for up to a minute (seen: a defer pod reached
	# MinIO, then the deleted pod's veth left the bridge and its next
	# connection to the node hung 30-75 s until ARP re-resolved).
	ip link set "$BRIDGE" address "$BRIDGE_MAC"
	ip addr replace "$NODE_IP/24" dev "$BRIDGE"
	ip link set "$BRIDGE" up
	# The bridge plugin turns on IPv4 forwarding; remember the host's setting for down.
	[ -f "$RUN/ip_forward" ] || cat /proc/sys/net/ipv4/ip_forward >"$RUN/ip_forward"
	# No kube-proxy: the service range is routed nowhere, so a host-network pod
	# using the in-cluster address fails at once instead of leaving the machine.
	ip route replace unreachable "$SERVICE_CIDR"
}

# ---------------------------------------------------------------- images

PAUSE_IMAGE=$(cat "$IMAGES_DIR/pause.ref" 2>/dev/null || echo kdefer.io/pause:1.0)

# ensure_images builds the images when one is missing (kdefer's own only once
# its cmd package exists). Rebuilding after a code change is `make images`.
ensure_images() {
	local n
	if [ ! -s "$IMAGES_DIR/pause.tar" ] || [ ! -s "$IMAGES_DIR/busybox.tar" ]; then
		log "building the pause and busybox images into $IMAGES_DIR"
		(cd "$REPO" && go run ./test/images --out "$IMAGES_DIR" --only pause,busybox) >&2
	fi
	# kdefer's own: a compile error in code under work must not stop the cluster.
	for n in kdefer-stage kdefer-controller; do
		ls "$REPO/cmd/$n/"*.go >/dev/null 2>&1 || continue
		[ -s "$IMAGES_DIR/$n.tar" ] && continue
		log "building the $n image into $IMAGES_DIR"
		(cd "$REPO" && go run ./test/images --out "$IMAGES_DIR" --only "$n") >&2 ||
			log "WARNING: building the $n image failed; the cluster starts without it (make images)"
	done
	PAUSE_IMAGE=$(cat "$IMAGES_DIR/pause.ref")
}

# load_images [FILE...]: imports tarballs whose content changed since the last import.
load_images() {
	local files=("$@") f sum stamp
	[ ${#files[@]} -gt 0 ] || files=("$IMAGES_DIR"/*.tar)
	mkdir -p "$DIR/containerd/imported"
	for f in "${files[@]}"; do
		[ -f "$f" ] || continue
		sum=$(sha256sum "$f" | cut -c1-64)
		stamp="$DIR/containerd/imported/$(basename "$f").sha256"
		[ "$(cat "$stamp" 2>/dev/null)" = "$sum" ] && continue
		ctr_ images import --snapshotter overlayfs "$f" >/dev/null || die "importing $f failed"
		echo "$sum" >"$stamp"
		log "imported $(basename "$f")"
	done
}

# ---------------------------------------------------------------- storage

storage() {
	local i name pvdir
	{
		cat <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: kdefer-local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOF
		for ((i = 0; i < PV_COUNT; i++)); do
			name=$(printf 'kdefer-local-%03d' "$i")
			pvdir="$DIR/pv/$name"
			mkdir -p "$pvdir"
			cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $name
  labels: {kdefer.io/local-pv: "true"}
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: kdefer-local
  volumeMode: Filesystem
  local: {path: $pvdir}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [$NODE]}
EOF
		done
	} >"$DIR/conf/storage.yaml"
	# up always reaches here with an empty etcd: create is one request per
	# object (apply needs three and the OpenAPI document: seconds on a busy host).
	kubectl create --validate=false -f "$DIR/conf/storage.yaml" >/dev/null 2>&1 ||
		kubectl apply --validate=false -f "$DIR/conf/storage.yaml" >/dev/null
}

# recycle_pvs: every Released PV of the class gets its directory emptied and its claimRef removed (Available again).
recycle_pvs() {
	local name phase path n=0
	while read -r name phase path; do
		[ "$phase" = Released ] || continue
		case "$path" in "$DIR"/pv/*) ;; *) continue ;; esac
		find "$path" -mindepth 1 -delete
		kubectl patch pv "$name" --type json -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null
		n=$((n + 1))
	done < <(kubectl get pv -l kdefer.io/local-pv=true -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.spec.local.path}{"\n"}{end}')
	log "recycled $n released PV(s)"
}

# ---------------------------------------------------------------- cleanup

# unmount_under DIR...: every mount point below the given paths, deepest first.
unmount_under() {
	local p m
	for p in "$@"; do
		awk -v p="$p/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
			m=$(printf '%b' "$m")
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
		done
	done
}

# procs_matching STR: pids of cluster programs (containerd, shims, runc, etcd,
# kube-*) whose command line contains STR (our state dir). Shells and other
# programs that merely mention the directory are never matched.
procs_matching() {
	local d p comm
	for d in /proc/[0-9]*; do
		p=${d#/proc/}
		comm=$(cat "$d/comm" 2>/dev/null) || continue
		case "$comm" in containerd | containerd-shim* | runc | etcd | kube-* | kubelet) ;; *) continue ;; esac
		tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF -- "$1" && echo "$p"
	done
	return 0
}

kubepods_cgroups() { find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods -depth -type d 2>/dev/null || true; }

# cleanup is best effort (a step that fails must not stop the next ones); down
# then checks for leftovers.
cleanup() {
	set +e
	local c ns netns=() p n
	stop_proc kubelet 15
	# Pod containers: kill and delete through our containerd (started for the purpose after an unclean stop).
	if [ -d "$DIR/containerd/root" ] && [ -f "$DIR/conf/containerd.toml" ] && command -v containerd >/dev/null; then
		if ! alive containerd; then
			mkdir -p "$RUN" "$LOGS"
			LAUNCH_ENV="HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 NO_PROXY=" \
				launch containerd containerd --config "$DIR/conf/containerd.toml"
			wait_until "containerd (cleanup)" 20 containerd ctr -a "$CTRD_SOCK" version || true
		fi
		if alive containerd; then
			for c in $(ctr_ containers ls -q 2>/dev/null); do
				ns=$(ctr_ containers info "$c" 2>/dev/null | grep -o '/var/run/netns/cni-[0-9a-f-]*' | head -1 || true)
				[ -n "$ns" ] && netns+=("$ns")
				ctr_ tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
				# containerd's loopback network caches a CNI result per sandbox
				rm -f "/var/lib/cni/results/cni-loopback-$c-lo"
			done
			for c in $(ctr_ containers ls -q 2>/dev/null); do
				ctr_ tasks delete -f "$c" >/dev/null 2>&1 || true
				ctr_ containers delete "$c" >/dev/null 2>&1 || true
			done
		fi
	fi
	for c in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop_proc "$c" 10; done
	# Anything left in the pods' cgroups, then shims and any process naming our state dir.
	for c in $(kubepods_cgroups); do
		for p in $(cat "$c/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
	done
	for ((n = 0; n < 3; n++)); do
		p=$(procs_matching "$DIR/")
		[ -z "$p" ] && break
		# shellcheck disable=SC2086
		kill -KILL $p 2>/dev/null || true
		sleep 0.3
	done
	# Network namespaces of our pods: from containerd and from the CNI result cache.
	for c in /var/lib/cni/results/"$CNI_NETWORK"-*; do
		[ -f "$c" ] || continue
		ns=$(grep -o '/var/run/netns/cni-[0-9a-f-]*' "$c" | head -1 || true)
		[ -n "$ns" ] && netns+=("$ns")
		rm -f "$c"
	done
	for ns in ${netns[@]+"${netns[@]}"}; do
		[ -e "$ns" ] || continue
		umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
		rm -f "$ns"
	done
	unmount_under "$DIR"
	ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
	ip route del unreachable "$SERVICE_CIDR" 2>/dev/null || true
	if [ -f "$RUN/ip_forward" ]; then cat "$RUN/ip_forward" >/proc/sys/net/ipv4/ip_forward; rm -f "$RUN/ip_forward"; fi
	for ((n = 0; n < 20; n++)); do
		for c in $(kubepods_cgroups); do rmdir "$c" 2>/dev/null || true; done
		[ -z "$(kubepods_cgroups)" ] && break
		sleep 0.25
	done
	[ -z "$(kubepods_cgroups)" ] || log "cgroups left: $(kubepods_cgroups | head -3)"
	cleanup_iptables
	for c in /var/log/containers/*.log; do
		[ -L "$c" ] && case "$(readlink "$c")" in "$DIR"/*) rm -f "$c" ;; esac
	done
	# Host directories that the kubelet, CNI or containerd created for us (recorded by up).
	if [ -f "$DIR/host-dirs" ]; then
		# the kubelet's device-plugin socket path ignores --root-dir
		grep -qx /var/lib/kubelet "$DIR/host-dirs" && rm -f /var/lib/kubelet/device-plugins/kubelet.sock
		sort -r "$DIR/host-dirs" | while read -r c; do
			if [ -d "$c" ]; then find "$c" -depth -type d -empty -delete 2>/dev/null || true; fi
		done
		rm -f "$DIR/host-dirs"
	fi
	# Cluster state goes; certificates, images (containerd root) and the last logs stay.
	rm -rf "$DIR/etcd" "$DIR/kubelet" "$DIR/pod-logs" "$DIR/pv" "$DIR/containerd/state" "$DIR/cni/ipam" "$RUN"
	# The node's file system: unmounted above (its loop device with it).
	if ! mountpoint -q "$NODEFS" 2>/dev/null; then rm -rf "$NODEFS" "$NODEFS_IMG"; fi
	set -e
}

# The kubelet, even with makeIPTablesUtilChains false, may add its hint/canary chains.
cleanup_iptables() {
	local ipt t ch rule
	for ipt in iptables ip6tables; do
		command -v "$ipt" >/dev/null || continue
		for t in filter nat mangle; do
			"$ipt" -t "$t" -S >/dev/null 2>&1 || continue
			# rules that jump to kubelet chains, then the chains
			"$ipt" -t "$t" -S | grep -E -- '-j (KUBE-KUBELET-CANARY|KUBE-FIREWALL|KUBE-MARK-DROP|KUBE-MARK-MASQ|KUBE-POSTROUTING|KUBE-IPTABLES-HINT)' |
				grep '^-A' | while read -r rule; do
				# shellcheck disable=SC2086
				"$ipt" -t "$t" ${rule/-A/-D} 2>/dev/null || true
			done || true
			for ch in $("$ipt" -t "$t" -S | awk '$1 == "-N" && $2 ~ /^KUBE-(KUBELET-CANARY|FIREWALL|MARK-DROP|MARK-MASQ|POSTROUTING|IPTABLES-HINT)$/ {print $2}'); do
				"$ipt" -t "$t" -F "$ch" 2>/dev/null || true
				"$ipt" -t "$t" -X "$ch" 2>/dev/null || true
			done
		done
	done
}

leftovers() {
	local found=0 p
	p=$(procs_matching "$DIR/"); [ -n "$p" ] && { log "left: processes $p"; found=1; }
	awk -v p="$DIR/" 'index($5, p) == 1' /proc/self/mountinfo | grep -q . && { log "left: mounts under $DIR"; found=1; }
	ip link show "$BRIDGE" >/dev/null 2>&1 && { log "left: bridge $BRIDGE"; found=1; }
	losetup -j "$NODEFS_IMG" 2>/dev/null | grep -q . && { log "left: loop device of $NODEFS_IMG"; found=1; }
	[ -n "$(kubepods_cgroups)" ] && { log "left: kubepods cgroups"; found=1; }
	return $found
}

# ---------------------------------------------------------------- commands

up() {
	need_root
	local t0=$SECONDS
	# unix socket paths (containerd, kubelet plugins) must stay under 108 bytes
	[ ${#DIR} -le 60 ] || die "KDEFER_CLUSTER_DIR=$DIR is too long for unix socket paths (max 60 characters): set a shorter one"
	deps
	binaries
	# Already up and healthy: keep it (and its objects); import changed images.
	local c all=1
	for c in $COMPONENTS; do alive "$c" || all=0; done
	if [ $all = 1 ] && kubectl wait --for=condition=Ready "node/$NODE" --timeout=5s >/dev/null 2>&1; then
		load_images
		log "cluster already up (fresh start: cluster.sh down && cluster.sh up); export KUBECONFIG=$KUBECONFIG_ADMIN"
		return 0
	fi
	if ! alive kube-apiserver && tcp_open 127.0.0.1 "$API_PORT"; then
		die "127.0.0.1:$API_PORT is in use by a program that is not this cluster's apiserver (another cluster with another KDEFER_CLUSTER_DIR? stop it first)"
	fi
	if [ -d "$RUN" ] || [ -d "$DIR/etcd" ] || [ -d "$DIR/kubelet" ] || [ -e "$NODEFS_IMG" ] || ip link show "$BRIDGE" >/dev/null 2>&1; then
		log "cleaning up a previous run"
		cleanup
	fi
	# The last run's logs are kept beside the new ones for post-mortems.
	if [ -d "$LOGS" ]; then rm -rf "$LOGS.prev"; mv "$LOGS" "$LOGS.prev"; fi
	mkdir -p "$RUN" "$LOGS"
	# Fixed paths outside the state dir that components create: removed by down when empty.
	for c in /var/lib/cni /var/log/containers /run/containerd /var/lib/kubelet; do
		[ -e "$c" ] || echo "$c" >>"$DIR/host-dirs"
	done
	ensure_images
	pki
	configs
	setup_nodefs
	setup_network
	start_etcd
	start_containerd
	load_images
	start_apiserver
	start_controller_manager
	start_scheduler
	start_kubelet
	storage
	log "waiting for node $NODE to be Ready"
	wait_until "node $NODE to register" "$WAIT_READY" kubelet kubectl get node "$NODE"
	wait_until "node $NODE Ready" "$WAIT_READY" kubelet kubectl wait --for=condition=Ready "node/$NODE" --timeout=5s
	wait_until "ServiceAccount default/default" 60 kube-controller-manager kubectl get serviceaccount default -n default
	# every pod mounts the root CA from this ConfigMap (its token volume waits for it)
	wait_until "ConfigMap default/kube-root-ca.crt" 60 kube-controller-manager kubectl get configmap kube-root-ca.crt -n default
	log "cluster up in $((SECONDS - t0))s; $(printf 'export KUBECONFIG=%s' "$KUBECONFIG_ADMIN")"
}

down() {
	need_root
	cleanup
	leftovers || die "cleanup incomplete (see above)"
	log "cluster down"
}

status() {
	local c rc=0
	for c in $COMPONENTS; do
		if alive "$c"; then printf '%-24s running (pid %s)\n' "$c" "$(cat "$(pidfile "$c")")"
		else printf '%-24s stopped\n' "$c"; rc=1; fi
	done
	if [ -f "$KUBECONFIG_ADMIN" ] && kubectl get --raw /readyz >/dev/null 2>&1; then
		kubectl get nodes -o wide 2>/dev/null || true
	else
		echo "apiserver not answering"; rc=1
	fi
	return $rc
}

env_() {
	cat <<EOF
export KUBECONFIG=$KUBECONFIG_ADMIN
export KDEFER_CLUSTER_DIR=$DIR
export KDEFER_NODE_NAME=$NODE
export KDEFER_NODE_IP=$NODE_IP
export KDEFER_CONTAINERD_SOCK=$CTRD_SOCK
export KDEFER_KUBECTL=$(kube_dir)/kubectl
export KDEFER_REGISTRY=$REGISTRY
EOF
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

cmd=${1:-}
shift || true
# One command at a time changes a cluster (e.g. make e2e and a manual down).
case "$cmd" in
up | down | start | stop | restart | load-images | recycle-pvs)
	exec 9>"$DIR/.lock"
	flock -w 600 9 || die "another cluster.sh holds $DIR/.lock"
	;;
esac
case "$cmd" in
up) up ;;
down) down ;;
status) status ;;
env) env_ ;;
deps) deps ;;
load-images) need_root; load_images "$@" ;;
recycle-pvs) recycle_pvs ;;
stop) need_root; stop_proc "${1:?component}" "${2:-10}" ;;
start) need_root; start_component "${1:?component}" ;;
restart) need_root; stop_proc "${1:?component}" "${2:-10}"; start_component "$1" ;;
logs) logs "$@" ;;
ctr) ctr_ "$@" ;;
_) "$@" ;; # internal: run one function (debugging)
*) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
