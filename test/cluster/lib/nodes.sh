# shellcheck shell=bash
# Sourced by cluster.sh: the nodes. Node 1 is the single-node cluster of old
# (its state directly under $DIR, node IP = the bridge's gateway 10.88.0.1,
# pod subnet 10.88.0.0/24, the kubelet's default cgroup root). Node I >= 2
# runs its own containerd and kubelet in the host's network namespace, with
#   state        $DIR/nI (containerd root and state, kubelet root, pod logs,
#                its own loop-mounted node file system and local PVs)
#   node IP      10.88.0.I on kdefer0 (the kubelet listens there only)
#   pod subnet   10.88.(I-1).0/24 on kdefer0, gateway 10.88.(I-1).1
#   cgroup root  /kdefer-nI (the kubelet's cgroupRoot: its pods' cgroups are
#                under /kdefer-nI/kubepods, never another kubelet's)
# so a node's pods, volumes and processes are its own; pods reach the host
# (MinIO, test servers) at 10.88.0.1 and other nodes' pods through the host.
# Why not a network namespace per node: kdefer's local overlay runs the manager
# on the host network, where the apiserver calls its webhooks on 127.0.0.1.

# node_ctx I: sets the variables that describe node I (1-based).
node_ctx() {
	local i=$1
	((i >= 1 && i <= MAX_NODES)) || die "node $i out of range 1..$MAX_NODES"
	NODE_I=$i
	if ((i == 1)); then
		NODE=$NODE1 SFX="" NDIR=$DIR NODE_IP=$HOST_IP HEALTHZ_ADDR=127.0.0.1 CGROUP_ROOT=""
		POD_SUBNET=10.88.0.0/24 POD_GW=$HOST_IP CNI_NETWORK=kdefer-pods PV_PREFIX=kdefer-local
	else
		NODE=$NODE1-$i SFX=-n$i NDIR=$DIR/n$i NODE_IP=10.88.0.$i HEALTHZ_ADDR=10.88.0.$i CGROUP_ROOT=/kdefer-n$i
		POD_SUBNET=10.88.$((i - 1)).0/24 POD_GW=10.88.$((i - 1)).1 CNI_NETWORK=kdefer-pods-$i PV_PREFIX=kdefer-local-n$i
	fi
	POD_NET=${POD_SUBNET%.0/24}
	CTRD_SOCK="$NDIR/run/containerd.sock"
	NODEFS_IMG="$NDIR/nodefs.img"
	NODEFS="$NDIR/nodefs"
	# The kubelet's podLogsDir, where kdefer's node agent finds it
	# (deploy/overlays/local: hostPath $HOST_LOG_DIR, NODE/pods below it; the
	# agent's spool is NODE/kdefer beside it, on the same file system).
	POD_LOGS="$HOST_LOG_DIR/$NODE/pods"
}

# node_index NAME: prints I for a node name, fails for anything else.
node_index() {
	local i
	for ((i = 1; i <= MAX_NODES; i++)); do
		node_ctx "$i"
		[ "$NODE" = "$1" ] && { echo "$i"; return 0; }
	done
	return 1
}

# nodes_present: the indexes of nodes that have state on this machine (node 1 always).
nodes_present() {
	local d
	echo 1
	for d in "$DIR"/n[0-9]*; do [ -d "$d" ] && echo "${d##*/n}"; done | sort -n
	return 0
}

# running_nodes: the node count of the cluster that up started (1 when none).
running_nodes() { cat "$DIR/node-count" 2>/dev/null || echo 1; }

render() { # TEMPLATE OUT: substitutes @VAR@ placeholders for the current node
	local gw=true routes='[]'
	# One bridge, several pod subnets: the bridge plugin refuses a second
	# address on a bridge it is the gateway of, so with more than one node the
	# gateways are set up front (setup_network) and every subnet routes the
	# others (and the host) through its gateway.
	if ((NODES > 1)); then gw=false routes='[{"dst": "10.88.0.0/16"}]'; fi
	sed -e "s#@DIR@#$DIR#g" -e "s#@NDIR@#$NDIR#g" -e "s#@PKI@#$PKI#g" -e "s#@RUN@#$RUN#g" -e "s#@NODE@#$NODE#g" \
		-e "s#@NODE_IP@#$NODE_IP#g" -e "s#@POD_SUBNET@#$POD_SUBNET#g" -e "s#@BRIDGE@#$BRIDGE#g" \
		-e "s#@POD_NET@#$POD_NET#g" -e "s#@POD_GW@#$POD_GW#g" -e "s#@IS_GATEWAY@#$gw#g" -e "s#@POD_ROUTES@#$routes#g" \
		-e "s#@HEALTHZ_ADDR@#$HEALTHZ_ADDR#g" -e "s#@SFX@#$SFX#g" -e "s#@POD_LOGS@#$POD_LOGS#g" \
		-e "s#@CNI_NETWORK@#$CNI_NETWORK#g" -e "s#@PAUSE_IMAGE@#$PAUSE_IMAGE#g" \
		-e "s#@EVICTION_HARD@#$EVICTION_HARD#g" -e "s#@CTRD_SOCK@#$CTRD_SOCK#g" \
		"$HERE/$1" >"$2"
}

configs() {
	local i
	mkdir -p "$DIR/conf" "$RUN" "$LOGS"
	kubeconfig "$KUBECONFIG_ADMIN" admin
	kubeconfig "$DIR/conf/controller-manager.kubeconfig" controller-manager
	kubeconfig "$DIR/conf/scheduler.kubeconfig" scheduler
	for ((i = 1; i <= NODES; i++)); do
		node_ctx "$i"
		mkdir -p "$NDIR/conf" "$NDIR/cni/net.d"
		kubeconfig "$NDIR/conf/kubelet.kubeconfig" "kubelet-client$SFX"
		render containerd.toml "$NDIR/conf/containerd.toml"
		render kubelet.yaml "$NDIR/conf/kubelet.yaml"
		[ -n "$CGROUP_ROOT" ] && echo "cgroupRoot: $CGROUP_ROOT" >>"$NDIR/conf/kubelet.yaml"
		render cni.conflist "$NDIR/cni/net.d/10-$CNI_NETWORK.conflist"
	done
	node_ctx 1
	registry_hosts
	admission
}

# admission: the apiserver's admission configuration; PodNodeSelector's
# cluster default is DEFAULT_NODE_SELECTOR (see cluster.sh). The webhook
# plugins present a client certificate to kdefer's webhooks, which answer
# nothing else (--webhook-client-ca-file): at the URL the single-node
# install gives them, and through the Service (multi-node install). The
# kubeconfig's users are matched by the webhook's host:port, a Service's by
# its DNS name, where "*." stands for leading labels.
admission() {
	local w
	cat >"$DIR/conf/admission.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodNodeSelector
  path: $DIR/conf/podnodeselector.yaml
EOF
	for w in ValidatingAdmissionWebhook MutatingAdmissionWebhook; do
		cat >>"$DIR/conf/admission.yaml" <<EOF
- name: $w
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $DIR/conf/webhook-client.kubeconfig
EOF
	done
	cat >"$DIR/conf/webhook-client.kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
- name: 127.0.0.1:9443
  user:
    client-certificate: $PKI/apiserver-webhook-client.crt
    client-key: $PKI/apiserver-webhook-client.key
- name: "*.kdefer-system.svc"
  user:
    client-certificate: $PKI/apiserver-webhook-client.crt
    client-key: $PKI/apiserver-webhook-client.key
EOF
	chmod 600 "$DIR/conf/webhook-client.kubeconfig"
	cat >"$DIR/conf/podnodeselector.yaml" <<EOF
podNodeSelectorPluginConfig:
  clusterDefaultNodeSelector: "$DEFAULT_NODE_SELECTOR"
EOF
}

# registry_hosts: containerd's hosts.toml for the test registry (config_path
# in containerd.toml, one directory for every node): plain HTTP, pull only.
# Every other registry stays unreachable (containerd's proxy is a closed
# port, see start_containerd).
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

# setup_nodefs: for the current node, a fresh ext4 image loop-mounted at
# $NODEFS, and the kubelet's root dir and the PV directories bind-mounted from
# it at their usual paths (the same device: the kubelet's nodefs signal counts
# what pods write into their local PVs). -m 0: no blocks reserved for root, so
# df and the kubelet agree on what is available; no journal and one inode per
# 64 KiB: test data on a file system made anew by every up, ~16 MiB written to
# make it. The mount's autoclear loop device goes with its last unmount (cleanup).
setup_nodefs() {
	local d
	mountpoint -q "$NODEFS" && die "$NODEFS is still mounted (cluster.sh down first)"
	mkdir -p "$NDIR"
	rm -f "$NODEFS_IMG"
	truncate -s "$NODEFS_SIZE" "$NODEFS_IMG"
	mkfs.ext4 -q -F -m 0 -O ^has_journal -i 65536 -E lazy_itable_init=0,nodiscard -L kdefer-nodefs "$NODEFS_IMG"
	mkdir -p "$NODEFS"
	mount -o loop "$NODEFS_IMG" "$NODEFS"
	for d in kubelet pv; do
		mkdir -p "$NODEFS/$d" "$NDIR/$d"
		mount --bind "$NODEFS/$d" "$NDIR/$d"
	done
}

# ---------------------------------------------------------------- cgroups

# node_cgroups I: the cgroup directories of node I's pods, deepest first.
node_cgroups() {
	local i=$1
	if ((i == 1)); then
		find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods -depth -type d 2>/dev/null || true
	else
		find /sys/fs/cgroup/*/kdefer-n"$i" -depth -type d 2>/dev/null || true
	fi
}

# kubepods_cgroups: every node's pod cgroups (and cgroup roots), deepest first.
kubepods_cgroups() {
	find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kdefer-n[0-9]* -depth -type d 2>/dev/null || true
}

# setup_cgroup_root: the current node's cgroup root in every v1 hierarchy (the
# kubelet refuses a cgroupRoot that does not exist). A new cpuset cgroup has no
# CPUs and no memory nodes until given its parent's.
setup_cgroup_root() {
	local h
	[ -n "$CGROUP_ROOT" ] || return 0
	for h in /sys/fs/cgroup/*/; do
		h=${h%/}
		[ "${h##*/}" = unified ] && continue
		[ -f "$h/cgroup.procs" ] || continue
		mkdir -p "$h$CGROUP_ROOT"
		if [ -f "$h/cpuset.cpus" ]; then
			cat "$h/cpuset.cpus" >"$h$CGROUP_ROOT/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h$CGROUP_ROOT/cpuset.mems"
		fi
	done
}

# node_pods_procs I: the pids in node I's pod cgroups (the memory hierarchy has them all).
node_pods_procs() {
	local c
	for c in $(node_cgroups "$1" | grep '^/sys/fs/cgroup/memory/'); do cat "$c/cgroup.procs" 2>/dev/null; done
	return 0
}

# kill_node_pods I: SIGKILL every process in node I's pod cgroups.
kill_node_pods() {
	local c p
	for c in $(node_cgroups "$1"); do
		for p in $(cat "$c/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
	done
}

# ---------------------------------------------------------------- network

setup_network() {
	local i
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge
	fi
	# A fixed MAC: a bridge without one takes the lowest MAC of its ports and
	# changes it whenever a pod's veth comes or goes, and pods that cached the
	# gateway's old MAC lose it for up to a minute (seen: a defer pod reached
	# MinIO, then the deleted pod's veth left the bridge and its next
	# connection to the node hung 30-75 s until ARP re-resolved).
	ip link set "$BRIDGE" address "$BRIDGE_MAC"
	ip addr replace "$HOST_IP/24" dev "$BRIDGE"
	# Nodes 2..N: their node IP and their pod subnet's gateway.
	for ((i = 2; i <= NODES; i++)); do
		node_ctx "$i"
		ip addr replace "$NODE_IP/32" dev "$BRIDGE"
		ip addr replace "$POD_GW/24" dev "$BRIDGE"
	done
	node_ctx 1
	ip link set "$BRIDGE" up
	# The bridge plugin turns on IPv4 forwarding; remember the host's setting for down.
	[ -f "$RUN/ip_forward" ] || cat /proc/sys/net/ipv4/ip_forward >"$RUN/ip_forward"
	# Several pod subnets: the host routes between them (the plugin, not the
	# gateway of any of them, does not do it then).
	((NODES == 1)) || echo 1 >/proc/sys/net/ipv4/ip_forward
	# No kube-proxy: the service range is routed nowhere, so a host-network pod
	# using the in-cluster address fails at once instead of leaving the machine.
	ip route replace unreachable "$SERVICE_CIDR"
}

# ---------------------------------------------------------------- one node at a time

# node_start I: boots node I: its containerd, then its kubelet.
node_start() {
	node_ctx "$1"
	[ -f "$NDIR/conf/kubelet.yaml" ] || die "node $NODE has no state (cluster.sh up --nodes N first)"
	mountpoint -q "$NODEFS" || die "$NODEFS is not mounted (cluster.sh up again)"
	start_containerd
	start_kubelet
	log "node $NODE started"
}

# node_stop I: an orderly stop of node I's kubelet and containerd; its pods'
# containers keep running (as when a node's agents stop), the node goes NotReady.
node_stop() {
	node_ctx "$1"
	stop_proc "kubelet$SFX" 15
	stop_proc "containerd$SFX" 10
	log "node $NODE stopped (its containers keep running; cluster.sh start $NODE)"
}

# node_kill I: node I loses power: its kubelet, containerd, shims and every
# process of its pods get SIGKILL at once. Its state stays, so start boots it again.
node_kill() {
	local p n
	node_ctx "$1"
	# the agents first (nothing restarts or reports a container then), then the shims, then the pods
	stop_proc "kubelet$SFX" 2 KILL
	stop_proc "containerd$SFX" 2 KILL
	for ((n = 0; n < 3; n++)); do
		p=$(procs_matching "$CTRD_SOCK")
		# shellcheck disable=SC2086
		[ -n "$p" ] && kill -KILL $p 2>/dev/null
		kill_node_pods "$1"
		[ -z "$p" ] && [ -z "$(node_pods_procs "$1")" ] && break
		sleep 0.2
	done
	log "node $NODE killed (cluster.sh start $NODE boots it)"
}
