# shellcheck shell=bash
# Sourced by cluster.sh: taking everything down, and checking that nothing is left.

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
		# read, not cat: one fork per process makes a scan take seconds on a loaded machine
		read -r comm 2>/dev/null <"$d/comm" || continue
		case "$comm" in containerd | containerd-shim* | runc | etcd | kube-* | kubelet) ;; *) continue ;; esac
		tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF -- "$1" && echo "$p"
	done
	return 0
}

# cleanup_pods I: node I's pod containers killed and deleted through its
# containerd (started for the purpose after an unclean stop); prints the
# network namespaces they held.
cleanup_pods() {
	local c ns
	node_ctx "$1"
	# containerd's state dir goes with every cleanup: without it, nothing of a run is left to kill
	[ -d "$NDIR/containerd/state" ] && [ -f "$NDIR/conf/containerd.toml" ] && command -v containerd >/dev/null || return 0
	if ! alive "containerd$SFX"; then
		launch_containerd
		wait_until "containerd of $NODE (cleanup)" 20 "containerd$SFX" ctr -a "$CTRD_SOCK" version || true
	fi
	alive "containerd$SFX" || return 0
	for c in $(ctr_ containers ls -q 2>/dev/null); do
		ns=$(ctr_ containers info "$c" 2>/dev/null | grep -o '/var/run/netns/cni-[0-9a-f-]*' | head -1 || true)
		[ -n "$ns" ] && echo "$ns"
		ctr_ tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
		# containerd's loopback network caches a CNI result per sandbox
		rm -f "/var/lib/cni/results/cni-loopback-$c-lo"
	done
	for c in $(ctr_ containers ls -q 2>/dev/null); do
		ctr_ tasks delete -f "$c" >/dev/null 2>&1 || true
		ctr_ containers delete "$c" >/dev/null 2>&1 || true
	done
}

# cleanup is best effort (a step that fails must not stop the next ones); down
# then checks for leftovers. It takes down every node that has state here,
# whatever the node count of the run that made it.
cleanup() {
	set +e
	local c ns netns=() p n i nodes
	nodes=$(nodes_present)
	for i in $nodes; do node_ctx "$i"; stop_proc "kubelet$SFX" 15; done
	for i in $nodes; do
		while read -r ns; do [ -n "$ns" ] && netns+=("$ns"); done < <(cleanup_pods "$i")
	done
	for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_proc "$c" 10; done
	for i in $nodes; do node_ctx "$i"; stop_proc "containerd$SFX" 10; done
	# Anything left in the pods' cgroups, then shims and any process naming our state dir.
	for i in $nodes; do kill_node_pods "$i"; done
	for ((n = 0; n < 3; n++)); do
		p=$(procs_matching "$DIR/")
		[ -z "$p" ] && break
		# shellcheck disable=SC2086
		kill -KILL $p 2>/dev/null || true
		sleep 0.3
	done
	# Network namespaces of our pods: from containerd and from the CNI result cache.
	for i in $nodes; do
		node_ctx "$i"
		for c in /var/lib/cni/results/"$CNI_NETWORK"-*; do
			[ -f "$c" ] || continue
			# kdefer-pods-2-… are node 2's, not node 1's
			((i == 1)) && [[ ${c#/var/lib/cni/results/kdefer-pods-} =~ ^[0-9]+- ]] && continue
			ns=$(grep -o '/var/run/netns/cni-[0-9a-f-]*' "$c" | head -1 || true)
			[ -n "$ns" ] && netns+=("$ns")
			rm -f "$c"
		done
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
	rm -rf "$DIR/etcd" "$RUN" "$DIR/node-count" "$DIR/shared" "$DIR/binaries"
	for i in $nodes; do
		node_ctx "$i"
		rm -rf "$NDIR/kubelet" "$NDIR/pod-logs" "$HOST_LOG_DIR/$NODE" "$NDIR/pv" "$NDIR/containerd/state" "$NDIR/cni/ipam" "$NDIR/run"
		# The node's file system: unmounted above (its loop device with it).
		if ! mountpoint -q "$NODEFS" 2>/dev/null; then rm -rf "$NODEFS" "$NODEFS_IMG"; fi
	done
	node_ctx 1
	rmdir "$HOST_LOG_DIR" 2>/dev/null || true
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

# has_state: some node has state of a run that was not cleaned up.
has_state() {
	local i
	for i in $(nodes_present); do
		node_ctx "$i"
		if [ -d "$NDIR/run" ] || [ -d "$NDIR/kubelet" ] || [ -e "$NODEFS_IMG" ] || [ -d "$NDIR/containerd/state" ]; then
			node_ctx 1
			return 0
		fi
	done
	node_ctx 1
	return 1
}

# leftovers: names whatever of any node is still on the machine (exit 1 then).
leftovers() {
	local found=0 p i
	p=$(procs_matching "$DIR/"); [ -n "$p" ] && { log "left: processes $p"; found=1; }
	awk -v p="$DIR/" 'index($5, p) == 1' /proc/self/mountinfo | grep -q . && { log "left: mounts under $DIR"; found=1; }
	ip link show "$BRIDGE" >/dev/null 2>&1 && { log "left: bridge $BRIDGE"; found=1; }
	for i in $(nodes_present); do
		node_ctx "$i"
		losetup -j "$NODEFS_IMG" 2>/dev/null | grep -q . && { log "left: loop device of $NODEFS_IMG"; found=1; }
	done
	node_ctx 1
	[ -n "$(kubepods_cgroups)" ] && { log "left: kubepods cgroups"; found=1; }
	return $found
}
